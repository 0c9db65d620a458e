package notify

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/vocab"
)

// Console prints one clear block per run event to a writer (stdout by default).
type Console struct {
	mu sync.Mutex
	w  io.Writer
}

var _ Notifier = (*Console)(nil)

// NewConsole returns a console notifier writing to w.
func NewConsole(w io.Writer) *Console { return &Console{w: w} }

// Open prints the run's header block.
func (c *Console) Open(_ context.Context, run RunInfo) (Thread, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "── run %s opened ── %s\n", run.ID, alertText(run.Alert.Labels["alertname"]))
	fmt.Fprintf(&b, "   alert:     %s\n", labelString(run.Alert.Labels))
	fmt.Fprintf(&b, "   since:     %s\n", run.Alert.StartsAt.UTC().Format(time.RFC3339))
	if s := run.Alert.Annotations["summary"]; s != "" {
		fmt.Fprintf(&b, "   summary:   %s\n", alertText(s))
	}
	if len(run.Playbooks) > 0 {
		fmt.Fprintf(&b, "   playbooks: %s\n", strings.Join(run.Playbooks, ", "))
	}
	if run.Resumed > 0 {
		fmt.Fprintf(&b, "   resumed:   %d× after an interruption\n", run.Resumed)
	}
	if run.Group != nil {
		groupBlock(&b, run.ID, *run.Group)
	}
	c.print(b.String())
	return Thread{TS: run.ID}, nil
}

// Reply prints one finished step.
func (c *Console) Reply(_ context.Context, t Thread, r StepReport) error {
	var b strings.Builder
	if r.Member != nil {
		memberBlock(&b, t.TS, *r.Member)
		c.print(b.String())
		return nil
	}
	if r.Change != "" {
		fmt.Fprintf(&b, "── run %s · verdict changed: %s\n", t.TS, untrusted.Text(r.Change))
		c.print(b.String())
		return nil
	}
	if r.Status == vocab.StatusNotConfigured { // grey, one line: what is missing, not a failure
		fmt.Fprintf(&b, "── run %s · step %s (%s, tier %s) not configured: %s\n", t.TS, r.StepID, r.Kind, r.Tier, untrusted.Text(r.Reason))
		c.print(b.String())
		return nil
	}
	if r.Notice != "" { // about the run, not a step
		fmt.Fprintf(&b, "── run %s · %s\n", t.TS, r.Notice)
	} else {
		fmt.Fprintf(&b, "── run %s · step %s (%s, tier %s) %s in %s\n", t.TS, r.StepID, r.Kind, r.Tier, r.Status, r.Duration.Round(time.Millisecond))
	}
	if r.Summary != "" {
		fmt.Fprintf(&b, "   %s\n", untrusted.Text(r.Summary))
	}
	switch {
	case r.Reason != "" && r.Error != "":
		fmt.Fprintf(&b, "   why: %s: %s\n", untrusted.Text(r.Reason), untrusted.Text(r.Error))
	case r.Reason != "" || r.Error != "":
		fmt.Fprintf(&b, "   why: %s%s\n", untrusted.Text(r.Reason), untrusted.Text(r.Error))
	}
	for _, l := range r.Links {
		if l.Pending {
			fmt.Fprintf(&b, "   %s: %s\n", untrusted.Text(l.Name), PendingNote)
			continue
		}
		fmt.Fprintf(&b, "   %s: %s\n", untrusted.Text(l.Text()), untrusted.Text(l.URL))
	}
	c.print(b.String())
	return nil
}

// Close prints the run's outcome. The verdict's edits (preliminary and
// refined) print nothing: in Slack they edit the parent and add no reply,
// and they are delivered ahead of the step replies waiting (runner/outbox's
// pendingOps), so a console, which cannot edit what it printed, showed the
// whole outcome block before the replies and again at the end. The
// triage step's own reply says the verdict where it comes, and the end's
// block has it whole: parent, replies as steps finish, verdict, end.
func (c *Console) Close(_ context.Context, t Thread, s Summary) error {
	if VerdictEdit(s.Key) {
		return nil
	}
	var b strings.Builder
	if s.Group != nil {
		groupBlock(&b, t.TS, *s.Group)
		if s.Key == KeyGroupUpdate {
			c.print(b.String())
			return nil
		}
	}
	fmt.Fprintf(&b, "── run %s %s", t.TS, s.Status)
	if s.Duration > 0 {
		fmt.Fprintf(&b, " after %s", s.Duration.Round(time.Second))
	}
	b.WriteString(" ──\n")
	if s.Reason != "" {
		fmt.Fprintf(&b, "   why: %s\n", untrusted.Text(s.Reason))
	}
	if v := s.Verdict; v != nil {
		fmt.Fprintf(&b, "   verdict: %s", untrusted.Text(vocab.VerdictText(v)))
		if v.Preliminary {
			b.WriteString(" (preliminary)")
		}
		if len(v.Contributing) > 0 {
			fmt.Fprintf(&b, " (also: %s)", strings.Join(v.Contributing, ", "))
		}
		b.WriteString("\n")
		if sc := vocab.ScopeText(v); sc != "" {
			fmt.Fprintf(&b, "   %s\n", untrusted.Text(sc))
		}
		for _, e := range vocab.EvidenceBesideScope(v) { // the scope is said once, above
			fmt.Fprintf(&b, "   · %s\n", untrusted.Text(e))
		}
		for _, a := range vocab.AllAdvice(v) {
			fmt.Fprintf(&b, "   → %s\n", untrusted.Text(a))
		}
	}
	if s.ResolvedAt != nil {
		fmt.Fprintf(&b, "   alert resolved at %s\n", s.ResolvedAt.UTC().Format(time.RFC3339))
	}
	c.print(b.String())
	return nil
}

func (c *Console) print(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.w, s)
}

func labelString(kv map[string]string) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = alertText(k) + "=" + untrusted.Quote(untrusted.Clip(kv[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// alertText is a label or annotation as the console prints it: bounded, on
// one line, nothing in it acting on the terminal.
func alertText(s string) string { return untrusted.Text(untrusted.Clip(s)) }
