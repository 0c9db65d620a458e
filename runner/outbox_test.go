package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// farSide is a notifier as strict as a chat service: it keeps the thread it
// was sent (one entry per operation key, in arrival order), refuses a reply or
// update to a thread it never opened, and can be scripted to be slow, to fail
// uncertainly (apply the call, then report an error, as a dropped connection
// does), or to answer 429. With Retry it looks the operation up first, as the
// Slack notifier does through message metadata.
type farSide struct {
	mu      sync.Mutex
	posted  map[string][]string // by run: operation keys, in the order they took effect
	seen    map[string]int      // by run|key
	retries int
	// gate, when set, blocks every call until it is closed.
	gate chan struct{}
	// fail decides, per call, what goes wrong: "" nothing, "drop" applied
	// then an error, "429" rate limited before applying.
	fail func(key string, call int) string
	at   map[string][]time.Time
	// opened holds what each run's parent was opened with.
	opened map[string]notify.RunInfo
}

func newFarSide() *farSide {
	return &farSide{posted: map[string][]string{}, seen: map[string]int{}, at: map[string][]time.Time{},
		opened: map[string]notify.RunInfo{}}
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
	f.at[key] = append(f.at[key], time.Now())
	call := len(f.at[key])
	if needThread && (t.TS != run || f.seen[run+"|open"] == 0) {
		return fmt.Errorf("thread_not_found for %s", key)
	}
	mode := ""
	if f.fail != nil {
		mode = f.fail(key, call)
	}
	if mode == "429" {
		return &notify.RateLimitedError{RetryAfter: 700 * time.Millisecond, Err: errors.New("ratelimited")}
	}
	if retry {
		f.retries++
		if f.seen[run+"|"+key] > 0 { // found it: an earlier attempt took effect
			return nil
		}
	}
	f.seen[run+"|"+key]++
	f.posted[run] = append(f.posted[run], key)
	if mode == "drop" {
		return errors.New("connection reset after the request was sent")
	}
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
// assertion, long enough for a thread whose every operation is retried once
// after its backoff on a machine at twice its cores' load.
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

// checkThread asserts the thread holds each operation exactly once, the parent
// first and the end last, with the steps' replies before the end. (The
// verdict's edit of the parent may overtake replies still queued:
// TestVerdictOvertakesQueuedReplies.)
func checkThread(t *testing.T, f *farSide, run string, want ...string) {
	t.Helper()
	keys, doubled := f.thread(run)
	if len(doubled) > 0 {
		t.Errorf("posted twice: %v (thread %v)", doubled, keys)
	}
	if len(keys) != len(want) || keys[0] != keyOpen || keys[len(keys)-1] != keyFinished {
		t.Fatalf("thread %v, want exactly %v with the parent first and the end last", keys, want)
	}
	got := map[string]bool{}
	for _, k := range keys {
		got[k] = true
	}
	for _, k := range want {
		if !got[k] {
			t.Errorf("thread %v lacks %s", keys, k)
		}
	}
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

// TestRunNeverWaitsForTheNotifier: with a notifier that answers nothing, the
// run still finishes; once it answers, the whole thread arrives, in order,
// each operation once.
func TestRunNeverWaitsForTheNotifier(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		f.gate = make(chan struct{})
		c := fakestep.NewCounter()
		s := newService(t, db, threeSteps(c), true, notifyTo(f))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		r := waitRun(t, s, id, "finished while the notifier hangs", isFinished)
		if r.Status != vocab.StatusSucceeded {
			t.Fatalf("run %s (%s)", r.Status, r.Reason)
		}
		if keys, _ := f.thread(id); len(keys) != 0 {
			t.Fatalf("delivered %v through a closed gate", keys)
		}
		close(f.gate)
		f.waitFor(t, id, keyFinished)
		checkThread(t, f, id, wantThread...)
	})
}

// TestVerdictOvertakesQueuedReplies: while the notifier is stuck, the run
// finishes and its whole thread queues; once it answers, the parent's verdict
// edit goes right after the parent, ahead of the three step replies recorded
// before it, and the end still comes last. (Before, the verdict waited behind
// every earlier reply: in a busy channel paced at 1 post/s that was minutes.)
func TestVerdictOvertakesQueuedReplies(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		f.gate = make(chan struct{})
		s := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		waitRun(t, s, id, "finished while the notifier hangs", isFinished)
		close(f.gate)
		f.waitFor(t, id, keyFinished)
		checkThread(t, f, id, wantThread...)
		keys, _ := f.thread(id)
		if idx(keys, keyVerdict) != 1 {
			t.Fatalf("thread %v: the verdict edit must come right after the parent", keys)
		}
		if a, b, tri := idx(keys, stepKey("pb", "a")), idx(keys, stepKey("pb", "b")), idx(keys, stepKey("pb", "tri")); max(a, b) > tri {
			t.Errorf("thread %v: the step replies must keep their recorded order (tri after a and b)", keys)
		}
	})
}

// pacedReplies holds every reply for a while before it reaches the far side,
// as a notifier waiting for a busy channel's pace does.
type pacedReplies struct {
	*farSide
	wait time.Duration
}

func (p pacedReplies) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	select {
	case <-time.After(p.wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.farSide.Reply(ctx, t, r)
}

// TestVerdictGoesBesideAPacedReply: while the first step's reply waits 2 s
// for the channel's pace (the thread held by its deliverer), triage records
// the verdict; its edit of the parent is delivered beside that reply, before
// it lands, not after it and the other queued one.
func TestVerdictGoesBesideAPacedReply(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		slowVerdict := fakestep.Func(func(ctx context.Context, _ *vocab.Input) (*vocab.Result, error) {
			select { // the first reply is waiting for the pace by now
			case <-time.After(600 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &vocab.Result{Summary: "overload", Verdict: &vocab.Verdict{ID: "overload"}}, nil
		})
		p := planner(
			func() playbooks.PlannedStep {
				return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(fakestep.NewCounter(), nil))
			},
			func() playbooks.PlannedStep {
				st := fakestep.Step("tri", vocab.TierTriage, slowVerdict)
				st.Kind = "triage"
				return st
			})
		s := newService(t, db, p, true, notifyTo(pacedReplies{f, 2 * time.Second}))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		f.waitFor(t, id, keyFinished)
		checkThread(t, f, id, keyOpen, stepKey("pb", "a"), stepKey("pb", "tri"), keyVerdict, keyFinished)
		keys, _ := f.thread(id)
		if idx(keys, keyVerdict) != 1 {
			t.Fatalf("thread %v: the verdict edit must land right after the parent, beside the paced reply", keys)
		}
	})
}

// TestThreadSurvivesUncertainFailures: every operation's first attempt takes
// effect and then fails (a dropped connection): the retry looks it up and
// posts nothing twice; the thread stays in order.
func TestThreadSurvivesUncertainFailures(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		f.fail = func(_ string, call int) string {
			if call == 1 {
				return "drop"
			}
			return ""
		}
		s := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		start := time.Now()
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		f.waitFor(t, id, keyFinished)
		// The last drop's retry comes after its backoff (1 s).
		deadline := time.Now().Add(farSideGuard)
		for {
			f.mu.Lock()
			n := f.retries
			f.mu.Unlock()
			if n >= len(wantThread) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d retries flagged after %s, want one per operation (%d)", n, farSideGuard, len(wantThread))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%d operations, each dropped once and retried after its backoff, delivered in %s",
			len(wantThread), time.Since(start).Round(time.Millisecond))
		time.Sleep(200 * time.Millisecond) // a retry too many would be flagged by now
		checkThread(t, f, id, wantThread...)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.retries != len(wantThread) {
			t.Errorf("%d retries flagged, want one per operation (%d)", f.retries, len(wantThread))
		}
	})
}

// TestRateLimitIsWaitedOut: a 429 on a reply holds the thread for its
// Retry-After; nothing is lost or doubled, and the retry comes no sooner.
func TestRateLimitIsWaitedOut(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		limited := stepKey("pb", "a")
		f.fail = func(key string, call int) string {
			if key == limited && call <= 2 {
				return "429"
			}
			return ""
		}
		s := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		id := acceptOne(t, s, firing("fp", time.Now().UTC())).RunID
		f.waitFor(t, id, keyFinished)
		checkThread(t, f, id, wantThread...)
		f.mu.Lock()
		at := f.at[limited]
		f.mu.Unlock()
		if len(at) != 3 {
			t.Fatalf("%d attempts of the limited reply, want 3", len(at))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < 650*time.Millisecond {
				t.Errorf("attempt %d came %s after a 429 asking for 700ms", i+1, gap)
			}
		}
	})
}

// TestResolutionAfterTheRunFinished reaches the thread: the resolution is
// recorded with the state change, whichever replica took the webhook.
func TestResolutionAfterTheRunFinished(t *testing.T) {
	forEachStore(t, func(t *testing.T, db dbRef) {
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

// TestDeliveryResumesAfterItsDelivererDied: a process that crashed while
// delivering (its lease on the thread held) is replaced once the lease ends;
// the operation it was sending is retried as uncertain and not doubled.
func TestDeliveryResumesAfterItsDelivererDied(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		f.fail = func(key string, call int) string {
			if key == keyOpen && call == 1 {
				return "drop"
			}
			return ""
		}
		hold := make(chan struct{})
		blocked := &gatedNotifier{farSide: f, block: keyOpen, gate: hold}
		first := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(blocked))
		id := acceptOne(t, first, firing("fp", time.Now().UTC())).RunID
		waitRun(t, first, id, "finished", isFinished)
		blocked.waitBlocked(t)
		first.abandon() // dies mid-call, lease held
		newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		f.waitFor(t, id, keyFinished)
		close(hold)
		time.Sleep(200 * time.Millisecond)
		checkThread(t, f, id, wantThread...)
	})
}

// gatedNotifier blocks the first call for one key until gate closes, after
// letting it take effect (the far side got it; the deliverer never learns).
type gatedNotifier struct {
	*farSide
	block   string
	gate    chan struct{}
	mu      sync.Mutex
	blocked bool
}

func (g *gatedNotifier) Open(ctx context.Context, r notify.RunInfo) (notify.Thread, error) {
	th, err := g.farSide.Open(ctx, r)
	g.mu.Lock()
	first := !g.blocked && g.block == keyOpen
	g.blocked = true
	g.mu.Unlock()
	if first {
		<-g.gate
		return th, errors.New("process died")
	}
	return th, err
}

func (g *gatedNotifier) waitBlocked(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g.mu.Lock()
		b := g.blocked
		g.mu.Unlock()
		if b {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the first delivery never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoReplicasOneThread: two processes on one store, both delivering: each
// operation reaches the thread once, in order. On a loaded machine a
// heartbeat can miss the test's 2 s lease and the other replica resumes the
// run: that is the design, and its thread then holds exactly one resume reply
// per resume the run's record counts, never more, never a doubled step.
func TestTwoReplicasOneThread(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, db dbRef) {
		f := newFarSide()
		a := newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		newService(t, db, threeSteps(fakestep.NewCounter()), true, notifyTo(f))
		var ids []string
		for i := range 5 {
			ids = append(ids, acceptOne(t, a, firing(fmt.Sprintf("fp%d", i), time.Now().UTC())).RunID)
		}
		final := map[string]*runs.Run{}
		for _, id := range ids {
			final[id] = waitRun(t, a, id, "finished", isFinished)
		}
		for _, id := range ids {
			f.waitFor(t, id, keyFinished)
		}
		time.Sleep(300 * time.Millisecond)
		for _, id := range ids {
			want := append([]string(nil), wantThread...)
			for n := 1; n <= final[id].Resumed; n++ {
				t.Logf("run %s was resumed (a lease lapsed under load): its thread holds resume reply %d", id, n)
				want = append(want, resumedKey(n))
			}
			checkThread(t, f, id, want...)
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
	s := newService(t, dbRef{Path: filepath.Join(t.TempDir(), "autocapture.db")}, p, true, notifyTo(f),
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
	forEachStore(t, func(t *testing.T, db dbRef) {
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
