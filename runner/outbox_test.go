package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// farSide is a notifier as strict as a chat service: it keeps the thread it
// was sent (one entry per operation key, in arrival order) and refuses a
// reply or update to a thread it never opened. With Retry it looks the
// operation up first, as the Slack notifier does through message metadata.
// (The outbox's own tests script failures: runner/outbox's harness.)
type farSide struct {
	mu     sync.Mutex
	posted map[string][]string // by run: operation keys, in the order they took effect
	seen   map[string]int      // by run|key
	// gate, when set, blocks every call until it is closed.
	gate chan struct{}
	// opened holds what each run's parent was opened with.
	opened map[string]notify.RunInfo
}

func newFarSide() *farSide {
	return &farSide{posted: map[string][]string{}, seen: map[string]int{}, opened: map[string]notify.RunInfo{}}
}

func (f *farSide) do(ctx context.Context, run, key string, retry bool, needThread bool, t notify.Thread) error {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if needThread && (t.TS != run || f.seen[run+"|open"] == 0) {
		return fmt.Errorf("thread_not_found for %s", key)
	}
	if retry && f.seen[run+"|"+key] > 0 { // found it: an earlier attempt took effect
		return nil
	}
	f.seen[run+"|"+key]++
	f.posted[run] = append(f.posted[run], key)
	return nil
}

func (f *farSide) Open(ctx context.Context, r notify.RunInfo) (notify.Thread, error) {
	f.mu.Lock()
	f.opened[r.ID] = r
	f.mu.Unlock()
	return notify.Thread{Channel: "C1", TS: r.ID}, f.do(ctx, r.ID, "open", r.Retry, false, notify.Thread{})
}

func (f *farSide) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	return f.do(ctx, r.RunID, r.Key, r.Retry, true, t)
}

func (f *farSide) Close(ctx context.Context, t notify.Thread, s notify.Summary) error {
	return f.do(ctx, s.RunID, s.Key, s.Retry, true, t)
}

// thread returns the keys in the order they took effect and whether any key
// took effect twice.
func (f *farSide) thread(run string) (keys []string, doubled []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, n := range f.seen {
		if n > 1 {
			doubled = append(doubled, k)
		}
	}
	return append([]string(nil), f.posted[run]...), doubled
}

// farSideGuard bounds the waits on the far side: a hang guard, not a timing
// assertion, long enough for a run and its thread on a machine at twice its
// cores' load.
const farSideGuard = 90 * time.Second

func (f *farSide) waitFor(t *testing.T, run, key string) {
	t.Helper()
	deadline := time.Now().Add(farSideGuard)
	for {
		f.mu.Lock()
		n := f.seen[run+"|"+key]
		f.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			keys, _ := f.thread(run)
			t.Fatalf("operation %s never delivered; thread: %v", key, keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// threeSteps is a plan of two metrics steps and a triage step with a verdict.
func threeSteps(c *fakestep.Counter) fakePlanner {
	verdict := fakestep.Func(func(context.Context, *vocab.Input) (*vocab.Result, error) {
		return &vocab.Result{Summary: "overload", Verdict: &vocab.Verdict{ID: "overload"}}, nil
	})
	return planner(
		func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) },
		func() playbooks.PlannedStep { return fakestep.Step("b", vocab.TierMetrics, fakestep.OK(c, nil)) },
		func() playbooks.PlannedStep {
			s := fakestep.Step("tri", vocab.TierTriage, verdict)
			s.Kind = "triage"
			return s
		})
}

func idx(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}

var wantThread = []string{keyOpen, stepKey("pb", "a"), stepKey("pb", "b"), stepKey("pb", "tri"), keyVerdict, keyFinished}

// TestResolutionAfterTheRunFinished reaches the thread: the resolution is
// recorded with the state change, whichever replica took the webhook.
func TestResolutionAfterTheRunFinished(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newFarSide()
		s := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		start := time.Now().UTC()
		id := acceptOne(t, s, firing("fp", start)).RunID
		waitRun(t, s, id, "finished", isFinished)
		f.waitFor(t, id, keyFinished)
		other := newService(t, db, threeSteps(fakestep.NewCounter()), false, notifyTo(f))
		if acc := acceptOne(t, other, resolvedAlert("fp", start, time.Now().UTC())); acc.RunID != id {
			t.Fatalf("resolution went to run %q, want %s", acc.RunID, id)
		}
		f.waitFor(t, id, keyResolved)
		keys, doubled := f.thread(id)
		if keys[len(keys)-1] != keyResolved || len(doubled) > 0 {
			t.Errorf("thread %v (doubled %v), want the resolution last, nothing twice", keys, doubled)
		}
	})
}

// TestRoutingLabelChoosesTheChannel: an alert carrying the routing label
// (notify.slack.channel_label) has its thread in that channel, over the
// playbook's notify.channel; one without it keeps the playbook's.
func TestRoutingLabelChoosesTheChannel(t *testing.T) {
	f := newFarSide()
	p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
		pl := plan("pb", fakestep.Step("a", vocab.TierMetrics, fakestep.OK(fakestep.NewCounter(), nil)))
		pl.Channel = "C0VLLMTEAM"
		return []*playbooks.Plan{pl}
	}}
	s := newService(t, testenv.DB{Path: filepath.Join(t.TempDir(), "autocapture.db")}, p, true, notifyTo(f),
		func(o *Options) { o.ChannelLabel = "slack_channel" })
	routed := firing("fp-routed", time.Now().UTC())
	routed.Labels["slack_channel"] = "C0PLATFORM"
	rid := acceptOne(t, s, routed).RunID
	pid := acceptOne(t, s, firing("fp-plain", time.Now().UTC())).RunID
	f.waitFor(t, rid, keyFinished)
	f.waitFor(t, pid, keyFinished)
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.opened[rid].Channel; got != "C0PLATFORM" {
		t.Errorf("routed alert's parent in %q, want the label's C0PLATFORM", got)
	}
	if got := f.opened[pid].Channel; got != "C0VLLMTEAM" {
		t.Errorf("unrouted alert's parent in %q, want the playbook's C0VLLMTEAM", got)
	}
}

// TestThreadGoesToThePlaybooksChannel: a playbook's notify.channel reaches the
// notifier with the parent (it was parsed and then dropped before).
func TestThreadGoesToThePlaybooksChannel(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		f := newFarSide()
		c := fakestep.NewCounter()
		p := fakePlanner{Plans: func(template.Alert) []*playbooks.Plan {
			pl := plan("pb", fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)))
			pl.Channel = "C0VLLMTEAM"
			return []*playbooks.Plan{pl}
		}}
		s := newService(t, db, p, true, notifyTo(f))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		f.waitFor(t, id, keyFinished)
		f.mu.Lock()
		defer f.mu.Unlock()
		if got := f.opened[id].Channel; got != "C0VLLMTEAM" {
			t.Errorf("parent opened with channel %q, want the playbook's C0VLLMTEAM", got)
		}
	})
}
