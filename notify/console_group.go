package notify

import (
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/internal/untrusted"
)

// The console shows a group as the Slack notifier does: the headline with
// counts by verdict and one line per member, and a member's one compact
// reply.

// groupBlock prints a group's parent: headline, then a line per member.
func groupBlock(b *strings.Builder, thread string, g Group) {
	kind := "alert storm"
	if g.Kind == GroupFleet {
		kind = "fleet of " + g.Model
	}
	fmt.Fprintf(b, "── thread %s: %s ── %s\n", thread, kind, g.Headline())
	for _, m := range g.Members {
		fmt.Fprintf(b, "   %-24s %-20s %s\n", alertText(m.Instance), alertText(m.Model), memberState(m))
	}
}

// memberState is a member's verdict, status and resolution.
func memberState(m Member) string {
	parts := []string{}
	if m.Verdict != "" {
		parts = append(parts, m.Verdict)
	}
	parts = append(parts, string(m.Status))
	if m.Resolved {
		parts = append(parts, "resolved")
	}
	return strings.Join(parts, " · ")
}

// memberBlock prints a member's compact reply.
func memberBlock(b *strings.Builder, thread string, r MemberReport) {
	m := r.Member
	fmt.Fprintf(b, "── thread %s · run %s on %s: %s", thread, m.RunID, alertText(m.Instance), m.Status)
	if r.Duration > 0 {
		fmt.Fprintf(b, " after %s", r.Duration.Round(time.Second))
	}
	b.WriteString("\n")
	if v := r.Verdict; v != nil {
		fmt.Fprintf(b, "   verdict: %s", v.ID)
		if len(v.Evidence) > 0 {
			fmt.Fprintf(b, " — %s", v.Evidence[0])
		}
		b.WriteString("\n")
	}
	if r.Reason != "" {
		fmt.Fprintf(b, "   why: %s\n", untrusted.Text(r.Reason))
	}
	for _, st := range r.Steps {
		fmt.Fprintf(b, "   · %s (%s) %s", st.StepID, st.Kind, st.Status)
		if st.Summary != "" {
			fmt.Fprintf(b, ": %s", untrusted.Text(st.Summary))
		}
		b.WriteString("\n")
	}
}
