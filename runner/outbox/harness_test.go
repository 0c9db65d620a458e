package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The runs' lease settings of the runner's tests: a lease of 20 heartbeats,
// so a loaded machine does not lose it.
const (
	testHeartbeat = 100 * time.Millisecond
	testLease     = 2 * time.Second
)

// harness is one process's outbox on a store: its own pools (the store and
// the heartbeat's), its own River client working the delivery queue, and,
// once started, the loops the run lifecycle drives it with (the heartbeat's
// RenewBeside, the sweeper's Sweep), each every heartbeat.
type harness struct {
	out    *Outbox
	db     *sql.DB
	beat   database.Pool
	tables database.Tables
	client *river.Client[*sql.Tx]
	owner  string

	stop    context.CancelFunc
	loops   sync.WaitGroup
	crashed bool // its cleanup does not wait for River again
}

// newHarness opens (and migrates) db for one process delivering to sink as
// "default"; start: its River client and loops run.
func newHarness(t *testing.T, db testenv.DB, sink notify.Notifier, start bool) *harness {
	t.Helper()
	ctx := context.Background()
	raw, d, drv, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { raw.Close() })
	if err := database.Migrate(ctx, raw, d, drv); err != nil {
		t.Fatalf("migrate store: %v", err)
	}
	beat, err := database.OpenBeat(db.URL, db.Path)
	if err != nil {
		t.Fatalf("open heartbeat pool: %v", err)
	}
	t.Cleanup(func() { beat.Close() })
	h := &harness{db: raw, beat: beat, tables: database.NewTables(d), owner: fmt.Sprintf("r0/%d/test", time.Now().UnixNano())}
	// The lifecycle's renewal bound: a third of what a lease has left
	// after a heartbeat, so three tries fit before the watchdog.
	renew := max(testHeartbeat, (testLease-testHeartbeat)/3)
	h.out = New(Config{Sinks: map[string]notify.Notifier{"default": sink}, Tables: h.tables,
		Store: func() Store { return raw }, Beat: func() Store { return beat },
		Client: func() *river.Client[*sql.Tx] { return h.client }, Content: content{},
		LeaseTimeout: testLease, HeartbeatInterval: testHeartbeat,
		RenewTimeout: func() time.Duration { return renew }, BeatReady: func(context.Context) {},
		Log: zaptest.NewLogger(t)})
	workers := river.NewWorkers()
	if err := h.out.AddWorker(workers); err != nil {
		t.Fatal(err)
	}
	h.client, err = river.NewClient(drv, &river.Config{ID: h.owner, Queues: h.out.Queues(), Workers: workers,
		JobTimeout: -1, FetchPollInterval: testHeartbeat, FetchCooldown: testHeartbeat,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	bg, stop := context.WithCancel(context.Background())
	h.stop = stop
	t.Cleanup(func() {
		if !h.crashed {
			h.halt()
		}
	})
	if start {
		if err := h.client.Start(ctx); err != nil {
			t.Fatalf("start river: %v", err)
		}
		h.loops.Add(2)
		go h.renew(bg)
		go h.sweep(bg)
	}
	return h
}

// renew renews the leases of the threads this process delivers every
// heartbeat, as the lifecycle's heartbeat does beside its runs'.
func (h *harness) renew(ctx context.Context) {
	defer h.loops.Done()
	var renewing sync.WaitGroup
	defer renewing.Wait()
	h.every(ctx, func() { h.out.RenewBeside(ctx, &renewing) })
}

// sweep gives waiting threads a deliverer every heartbeat, on its own loop
// as the lifecycle's sweeper does.
func (h *harness) sweep(ctx context.Context) {
	defer h.loops.Done()
	h.every(ctx, func() { _, _ = h.out.Sweep(ctx) })
}

// every runs f now and every heartbeat until ctx ends.
func (h *harness) every(ctx context.Context, f func()) {
	tick := time.NewTicker(testHeartbeat)
	defer tick.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// halt stops the process's loops and its River client.
func (h *harness) halt() { h.end(10 * time.Second) }

// end stops the loops and the River client, waiting up to wait for it.
func (h *harness) end(wait time.Duration) {
	h.stop()
	h.loops.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = h.client.StopAndCancel(ctx)
}

// crash makes the process behave as one killed with kill -9: its pools are
// closed first, so it renews, releases and records nothing more (River,
// on the same pool, cannot record its jobs' ends either), then its loops
// end and its River client is told to stop, waited for only briefly: what
// it would record goes nowhere, and a call stuck in a notifier holds it.
func (h *harness) crash() {
	_ = h.db.Close()
	_ = h.beat.Close()
	h.crashed = true
	h.end(time.Second)
}

// record appends ops to run runID's outbox in one transaction (the run's
// row made first when it has none), as the run lifecycle's transactions do.
func (h *harness) record(t *testing.T, runID string, ops ...Op) {
	t.Helper()
	ctx := context.Background()
	h.ensureRun(t, runID)
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := h.out.Append(ctx, tx, runID, ops...); err != nil {
		t.Fatalf("append %v: %v", ops, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// ensureRun inserts run runID's row unless it has one.
func (h *harness) ensureRun(t *testing.T, runID string) {
	t.Helper()
	ctx := context.Background()
	if ok, err := h.tables.Runs.Exists(ctx, h.db, runID); err != nil || ok {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	now := time.Now().UnixMilli()
	if _, err := h.tables.Runs.Insert(ctx, h.db, []database.NewRun{{ID: runID, Key: runID, Fingerprint: runID,
		Alertname: "VLLMSlowTTFT", Alert: "{}", StartsAt: now, Status: "running", CreatedAt: now, QueuedAt: now}}); err != nil {
		t.Fatalf("insert run %s: %v", runID, err)
	}
}

// threadLease is run id's thread lease: its owner and when it lapses
// (pump_until, milliseconds on the database's clock).
func (h *harness) threadLease(t *testing.T, id string) (owner string, lapses time.Time) {
	t.Helper()
	var until int64
	q := `SELECT pump_owner, pump_until FROM autocapture_threads WHERE run_id = $1 AND pump_until IS NOT NULL`
	if err := h.db.QueryRowContext(context.Background(), q, id).Scan(&owner, &until); err != nil {
		t.Fatalf("the thread lease of run %s: %v", id, err)
	}
	return owner, time.UnixMilli(until)
}

// content is what the operations say: each names its run, key and retry
// flag, which is what the far side keys its thread by.
type content struct{}

func (content) RunInfo(_ context.Context, runID, channel string, retry bool) (notify.RunInfo, error) {
	return notify.RunInfo{ID: runID, Channel: channel, Retry: retry}, nil
}

func (content) StepReply(_ context.Context, runID, key, _, step string, retry bool) (notify.StepReport, error) {
	return notify.StepReport{RunID: runID, StepID: step, Key: key, Retry: retry}, nil
}

func (content) Summary(_ context.Context, runID, key string, retry bool) (notify.Summary, error) {
	return notify.Summary{RunID: runID, Key: key, Retry: retry}, nil
}

func (content) ChangeReply(_ context.Context, runID, key, _, step string, retry bool) (notify.StepReport, error) {
	return notify.StepReport{RunID: runID, StepID: step, Key: key, Retry: retry}, nil
}

func (content) UploadsReply(_ context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	return notify.StepReport{RunID: runID, Key: key, Retry: retry}, nil
}

func (content) MemberReport(_ context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	return notify.StepReport{RunID: runID, Key: key, Retry: retry}, nil
}

func (content) ResumeClaimer(context.Context, string) (string, error) { return "", nil }

// sink is a notifier as strict as a chat service, recording each run's
// thread (operation keys in the order they took effect). It refuses a reply
// or edit to a thread it never opened; with Retry it looks the operation up
// first, as the Slack notifier does. Scripted: gate holds every call until
// closed; hold runs before a call reaches the far side (a channel's pace, a
// hang); fail makes a call "drop" (take effect, then error, as a dropped
// connection does) or "429"; after runs once a call took effect.
type sink struct {
	gate  chan struct{}
	hold  func(ctx context.Context, key string) error
	fail  func(key string, call int) string
	after func(key string) error

	mu      sync.Mutex
	posted  map[string][]string    // by run
	seen    map[string]int         // by run|key
	at      map[string][]time.Time // calls, by key
	retries int
	opened  map[string]notify.RunInfo
}

func newSink() *sink {
	return &sink{posted: map[string][]string{}, seen: map[string]int{}, at: map[string][]time.Time{},
		opened: map[string]notify.RunInfo{}}
}

func (s *sink) call(ctx context.Context, run, key string, retry, reply bool, th notify.Thread) error {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.hold != nil {
		if err := s.hold(ctx, key); err != nil {
			return err
		}
	}
	err := s.apply(run, key, retry, reply, th)
	if s.after != nil {
		if aerr := s.after(key); aerr != nil {
			return aerr
		}
	}
	return err
}

func (s *sink) apply(run, key string, retry, reply bool, th notify.Thread) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[key] = append(s.at[key], time.Now())
	if reply && (th.TS != run || s.seen[run+"|"+keyOpen] == 0) {
		return fmt.Errorf("thread_not_found for %s", key)
	}
	mode := ""
	if s.fail != nil {
		mode = s.fail(key, len(s.at[key]))
	}
	if mode == "429" {
		return &notify.RateLimitedError{RetryAfter: 700 * time.Millisecond, Err: errors.New("ratelimited")}
	}
	if retry {
		s.retries++
		if s.seen[run+"|"+key] > 0 { // an earlier attempt took effect
			return nil
		}
	}
	s.seen[run+"|"+key]++
	s.posted[run] = append(s.posted[run], key)
	if mode == "drop" {
		return errors.New("connection reset after the request was sent")
	}
	return nil
}

func (s *sink) Open(ctx context.Context, r notify.RunInfo) (notify.Thread, error) {
	s.mu.Lock()
	s.opened[r.ID] = r
	s.mu.Unlock()
	return notify.Thread{Channel: "C1", TS: r.ID}, s.call(ctx, r.ID, keyOpen, r.Retry, false, notify.Thread{})
}

func (s *sink) Reply(ctx context.Context, th notify.Thread, r notify.StepReport) error {
	return s.call(ctx, r.RunID, r.Key, r.Retry, true, th)
}

func (s *sink) Close(ctx context.Context, th notify.Thread, sum notify.Summary) error {
	return s.call(ctx, sum.RunID, sum.Key, sum.Retry, true, th)
}

// thread is run's keys in the order they took effect, and the keys of any
// run that took effect twice.
func (s *sink) thread(run string) (keys, doubled []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.seen {
		if n > 1 {
			doubled = append(doubled, k)
		}
	}
	return append([]string(nil), s.posted[run]...), doubled
}

// sinkGuard bounds the waits on the far side: a hang guard, not a timing
// assertion, long enough for a thread whose every operation is retried once
// after its backoff on a machine at twice its cores' load.
const sinkGuard = 90 * time.Second

// waitFor waits until run's operation key took effect.
func (s *sink) waitFor(t *testing.T, run, key string) {
	t.Helper()
	waitUntil(t, sinkGuard, "operation "+key+" of "+run+" delivered", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.seen[run+"|"+key] > 0
	})
}

// waitClosed waits until ch is closed (a hang guard of guard).
func waitClosed(t *testing.T, guard time.Duration, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls cond every 20 ms until guard (a hang guard).
func waitUntil(t *testing.T, guard time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The keys of the thread operations the tests look for.
var (
	keyOpen     = Open{}.Key()
	keyVerdict  = VerdictEdit{}.Key()
	keyFinished = Finished{}.Key()
)

// wantThread is a run's thread as the tests record it: the parent, three
// steps' replies, the verdict's edit and the end, in the lifecycle's order.
var wantThread = []string{keyOpen, stepKey("pb", "a"), stepKey("pb", "b"), stepKey("pb", "tri"), keyVerdict, keyFinished}

// recordThread records a run's whole thread (wantThread), an operation per
// transaction as the run makes them.
func (h *harness) recordThread(t *testing.T, runID string) {
	t.Helper()
	for _, o := range []Op{Open{}, StepReply{Plan: "pb", Step: "a"}, StepReply{Plan: "pb", Step: "b"},
		StepReply{Plan: "pb", Step: "tri"}, VerdictEdit{}, Finished{}} {
		h.record(t, runID, o)
	}
}

// checkThread asserts the thread holds each operation of want exactly once,
// the parent first and the end last.
func checkThread(t *testing.T, s *sink, run string, want ...string) {
	t.Helper()
	keys, doubled := s.thread(run)
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
