package notify

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

func fleet() Group {
	g := Group{Kind: GroupFleet, LeadID: "r1", Alert: "VLLMHighTTFT", Model: "llama-70b"}
	for i, v := range []string{"overload", "overload", "kv-pressure", "overload", "", "overload"} {
		st := vocab.StatusSucceeded
		if v == "" {
			st = vocab.StatusRunning
		}
		g.Members = append(g.Members, Member{RunID: "r" + string(rune('1'+i)), Alert: "VLLMHighTTFT",
			Instance: "10.0.0." + string(rune('1'+i)) + ":8000", Model: "llama-70b", Status: st, Verdict: v})
	}
	return g
}

// TestGroupHeadline: the counts are by verdict (else capturing, else the
// status), the most frequent first, and resolution is said only when every
// member resolved.
func TestGroupHeadline(t *testing.T) {
	g := fleet()
	if got, want := g.Headline(), "4 of 6 instances of llama-70b: overload · 1 capturing · 1 kv-pressure"; got != want {
		t.Errorf("fleet headline %q, want %q", got, want)
	}
	for i := range g.Members[:5] {
		g.Members[i].Resolved = true
	}
	if g.Resolved() {
		t.Error("resolved with one member still firing")
	}
	g.Members[5].Resolved = true
	if got := g.Headline(); !bytes.HasSuffix([]byte(got), []byte(" — resolved")) {
		t.Errorf("all resolved, headline %q does not say so", got)
	}
	storm := Group{Kind: GroupStorm, Alert: "A"}
	for i := range 200 {
		m := Member{Alert: "A", Status: "succeeded", Verdict: "overload"}
		if i%4 == 0 {
			m.Alert, m.Verdict, m.Status = "B", "", "queued"
		}
		storm.Members = append(storm.Members, m)
	}
	if got, want := storm.Headline(), "Alert storm: 200 alerts (A, B): 150 overload · 50 capturing"; got != want {
		t.Errorf("storm headline %q, want %q", got, want)
	}
}

// TestFleetHeadlineCountsInstances: a fleet counts instances, not runs: an
// instance that fired again in the window is one instance, shown with its
// latest run's outcome.
func TestFleetHeadlineCountsInstances(t *testing.T) {
	g := fleet()
	again := g.Members[2] // 10.0.0.3, kv-pressure, fires again: overload now
	again.RunID, again.Verdict = "r7", "overload"
	g.Members = append(g.Members, again)
	if got, want := g.Headline(), "5 of 6 instances of llama-70b: overload · 1 capturing"; got != want {
		t.Errorf("fleet headline %q, want %q", got, want)
	}
	one := Group{Kind: GroupFleet, Model: "m"}
	for i := range 6 {
		one.Members = append(one.Members, Member{RunID: fmt.Sprint(i), Instance: "10.0.0.1:8000", Status: "succeeded", Verdict: "unexplained"})
	}
	if got, want := one.Headline(), "1 of 1 instances of m: unexplained"; got != want {
		t.Errorf("six runs of one instance: headline %q, want %q", got, want)
	}
}

// TestConsoleGroup: the console shows a group's parent, a member's compact
// reply and an edit of the parent, with the same facts as Slack.
func TestConsoleGroup(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out)
	ctx := context.Background()
	g := fleet()
	th, err := c.Open(ctx, RunInfo{ID: "r1", Group: &g})
	if err != nil {
		t.Fatal(err)
	}
	rep := MemberReport{Member: g.Members[2], Duration: 6 * time.Second, Verdict: &vocab.Verdict{ID: "kv-pressure",
		Evidence: []string{"KV cache 98% full (threshold 95%)"}},
		Steps: []StepReport{{StepID: "scrape", Kind: "scrape", Status: "succeeded", Summary: "kv 0.98, waiting 42"},
			{StepID: "triage", Kind: "triage", Status: "succeeded", Summary: "kv-pressure"}}}
	if err := c.Reply(ctx, th, StepReport{RunID: "r3", Key: "member/r3/finished", Member: &rep}); err != nil {
		t.Fatal(err)
	}
	g.Members[4].Status, g.Members[4].Verdict, g.Members[4].Resolved = "succeeded", "overload", true
	if err := c.Close(ctx, th, Summary{RunID: "r1", Key: KeyGroupUpdate, Group: &g}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "console-group.golden")
	if *update {
		os.WriteFile(golden, out.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("console group differs from %s (rerun with -update if intended):\n%s", golden, out.String())
	}
}
