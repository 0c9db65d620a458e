package notify

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// A group is a thread several runs share instead of one thread each:
//   - a storm: one Alertmanager group brought more new firing alerts than
//     notify.storm.threshold; the parent is a table of them and each run
//     replies once, compactly, when it ends;
//   - a fleet: alerts of one alertname and model_name fired on several
//     instances within notify.storm.window, over any number of webhooks; the
//     first run's thread becomes the fleet's.
//
// A notifier learns of a group through RunInfo.Group (the parent), Summary.Group
// (a parent edit; with Key KeyGroupUpdate nothing else) and StepReport.Member
// (a member's compact reply). One that ignores them still shows every run.

// Group kinds.
const (
	GroupStorm = "storm"
	GroupFleet = "fleet"
)

// KeyGroupUpdate is the Summary.Key of an edit of a group's parent only: a
// member's verdict, end or resolution changed its line.
const KeyGroupUpdate = "group/update"

// Group is what a group's parent shows: one line per member, in the order
// they joined. The lead is the run whose thread the group uses.
type Group struct {
	Kind    string
	LeadID  string
	Alert   string // the lead's alertname
	Model   string // a fleet's model_name
	Members []Member
}

// Member is one run's line in a group's parent.
type Member struct {
	RunID    string
	Alert    string // alertname
	Instance string
	Model    string
	Status   vocab.Status // a run status
	Verdict  string       // the verdict's id, "" without one
	Resolved bool
}

// MemberReport is a member's compact reply, posted once when it ends: its
// outcome, verdict and one line per step, instead of a reply per step.
type MemberReport struct {
	Member   Member
	Reason   string
	Duration time.Duration
	Verdict  *vocab.Verdict
	Steps    []StepReport // without links or files
}

// Resolved says whether every member's alert resolved.
func (g Group) Resolved() bool {
	for _, m := range g.Members {
		if !m.Resolved {
			return false
		}
	}
	return len(g.Members) > 0
}

// Count is how many members share one outcome (a verdict, or a status
// without one).
type Count struct {
	What string
	N    int
}

// Outcome is what a member's line leads with: its verdict, else "capturing"
// while it runs, else its status.
func (m Member) Outcome() string {
	switch {
	case m.Verdict != "":
		return m.Verdict
	case m.Status == "" || m.Status == vocab.StatusQueued || m.Status == vocab.StatusRunning:
		return "capturing"
	}
	return string(m.Status)
}

// Counts are the members by Outcome, the most frequent first (then by name).
func (g Group) Counts() []Count {
	n := map[string]int{}
	for _, m := range g.counted() {
		n[m.Outcome()]++
	}
	out := make([]Count, 0, len(n))
	for w, c := range n {
		out = append(out, Count{w, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].What < out[j].What
	})
	return out
}

// Headline says the group in one line: "4 of 6 instances of llama-70b:
// overload · 1 kv-pressure · 1 capturing" for a fleet, "Alert storm: 200
// alerts (VLLMHighTTFT): 150 overload · 50 capturing" for a storm, and
// "resolved" once every member is.
func (g Group) Headline() string {
	cs := g.Counts()
	rest := make([]string, 0, len(cs))
	for _, c := range cs[min(1, len(cs)):] {
		rest = append(rest, fmt.Sprintf("%d %s", c.N, c.What))
	}
	var head string
	switch {
	case len(cs) == 0:
		head = "no members"
	case g.Kind == GroupFleet:
		head = fmt.Sprintf("%d of %d instances of %s: %s", cs[0].N, len(g.counted()), g.Model, cs[0].What)
	default:
		what := g.Alert
		if alerts := g.alertnames(); len(alerts) > 1 {
			what = strings.Join(alerts, ", ")
		}
		head = fmt.Sprintf("Alert storm: %d alerts (%s): %d %s", len(g.Members), what, cs[0].N, cs[0].What)
	}
	if len(rest) > 0 {
		head += " · " + strings.Join(rest, " · ")
	}
	if g.Resolved() {
		head += " — resolved"
	}
	return head
}

// counted are the members the headline counts: a storm's every member; a
// fleet's latest member per instance, since a fleet counts instances (six
// runs of one instance in the window are one instance, not "6 of 6").
func (g Group) counted() []Member {
	if g.Kind != GroupFleet {
		return g.Members
	}
	last := map[string]int{}
	for i, m := range g.Members {
		last[m.Instance] = i
	}
	out := make([]Member, 0, len(last))
	for i, m := range g.Members {
		if last[m.Instance] == i {
			out = append(out, m)
		}
	}
	return out
}

// alertnames are the members' distinct alertnames, at most three and "…".
func (g Group) alertnames() []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range g.Members {
		if !seen[m.Alert] {
			seen[m.Alert] = true
			out = append(out, m.Alert)
		}
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], "…")
	}
	return out
}
