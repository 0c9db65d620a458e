package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// startupSteps are the steps of a start that talk to PostgreSQL, in order
// (see startup). The test stops PostgreSQL at startupAt fractions of each
// step's duration into it, then startupOutage later starts it again.
var (
	startupSteps = []string{"ping", "migrations", "link key", "river start"}
	startupAt    = []float64{0.2, 0.6}
)

const (
	startupOutage = time.Second
	// startupRetried and startupStepDone are what startup logs.
	startupRetried  = "The database is unavailable while this replica starts; retrying the step."
	startupStepDone = "Finished a step of the start."
)

// TestStartupSurvivesPostgresRestart (issue 22): PostgreSQL stops (a fast
// shutdown: sessions end with 57P01, new ones are refused) at moments spread
// over a replica's start, Open then Start, and comes back ~1 s later. Every
// time the replica comes up, and then serves: a run goes through and its
// thread is closed (River's run and delivery queues both work). The moments
// fall inside each step of the start (ping, migrations, link key, River's
// start), on a fresh database (the migrations are most of the start) and on
// a migrated one (River's start is): each step's duration is timed first on
// this machine, and each stop is timed from the end of the step before (from
// the log), so that the time earlier steps take on a loaded machine does not
// move it out of its step. A start that ended before the stop is counted
// apart: it shows the running replica survives, not the start.
func TestStartupSurvivesPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := testenv.StartOwnPostgres(t)
	migrated := pg.CreateDatabase(t, "migrated")
	c := fakestep.NewCounter()
	p := planner(func() playbooks.PlannedStep { return fakestep.Step("a", vocab.TierMetrics, fakestep.OK(c, nil)) })
	n := &recNotifier{}
	open := func(ctx context.Context, dsn string, log *zap.Logger) (*Service, error) {
		s, err := Open(ctx, Options{Config: fastRuns(), DatabaseURL: dsn, DatabaseWait: 30 * time.Second, Planner: p,
			Notifiers: map[string]notify.Notifier{"default": n}, Log: log, Registerer: prometheus.NewRegistry()})
		if err != nil {
			return nil, err
		}
		if err := s.Start(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	fresh := 0
	phases := []struct {
		name string
		dsn  func() string
	}{
		{"fresh", func() string { fresh++; return pg.CreateDatabase(t, fmt.Sprintf("fresh_%d", fresh)) }},
		{"migrated", func() string { return migrated }},
	}
	if s, err := open(context.Background(), migrated, zap.NewNop()); err != nil {
		t.Fatalf("migrate: %v", err)
	} else {
		s.Close()
	}
	offsets := len(startupSteps) * len(startupAt)
	failed, during := map[string]int{}, map[string]int{}
	for _, ph := range phases {
		took := timeSteps(t, open, ph.dsn)
		t.Logf("%s: with PostgreSQL up, the steps %v take %v (median of 3)", ph.name, startupSteps, took)
		for i, step := range startupSteps {
			for _, f := range startupAt {
				o := restartAt{name: fmt.Sprintf("%s/%s+%.0f%%", ph.name, step, 100*f),
					delay: time.Duration(f * float64(took[i]))}
				if i > 0 {
					o.after = startupSteps[i-1]
				}
				ok, hit := startThroughRestart(t, pg, o, ph.dsn(), open, n)
				if !ok {
					failed[ph.name]++
				}
				if hit {
					during[ph.name]++
				}
			}
		}
	}
	t.Logf("%d stops per database: starts that failed %v; starts PostgreSQL stopped during %v (the rest had ended)", offsets, failed, during)
	for _, ph := range phases {
		if during[ph.name] < offsets/2 {
			t.Errorf("%s: PostgreSQL stopped during only %d of %d starts: the stops miss the start", ph.name, during[ph.name], offsets)
		}
	}
}

// timeSteps starts a replica three times on dsn() with PostgreSQL up and
// returns the median duration of each of startupSteps (from the log).
func timeSteps(t *testing.T, open func(context.Context, string, *zap.Logger) (*Service, error), dsn func() string) []time.Duration {
	t.Helper()
	took := make([][]time.Duration, len(startupSteps))
	for range 3 {
		core, logs := observer.New(zap.DebugLevel)
		s, err := open(context.Background(), dsn(), zap.New(core))
		if err != nil {
			t.Fatalf("start with PostgreSQL up: %v", err)
		}
		s.Close()
		for i, step := range startupSteps {
			done := logs.FilterMessage(startupStepDone).FilterField(zap.String("step", step)).All()
			if len(done) != 1 {
				t.Fatalf("step %s: %d log entries saying it finished, want 1", step, len(done))
			}
			took[i] = append(took[i], done[0].ContextMap()["took"].(time.Duration))
		}
	}
	median := make([]time.Duration, len(took))
	for i, d := range took {
		slices.Sort(d)
		median[i] = d[len(d)/2].Round(time.Millisecond)
	}
	return median
}

// restartAt is when a stop of PostgreSQL falls in a start: delay after the
// step after ended (after Open began when after is "").
type restartAt struct {
	name  string
	after string
	delay time.Duration
}

// startThroughRestart starts a replica on dsn, stops PostgreSQL at o and
// starts it again startupOutage later, then checks that the replica came up
// and serves. It says whether it did, and whether the start was still going
// when PostgreSQL stopped.
func startThroughRestart(t *testing.T, pg *testenv.OwnPostgres, o restartAt, dsn string,
	open func(context.Context, string, *zap.Logger) (*Service, error), n *recNotifier) (ok, during bool) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))
	type outcome struct {
		s    *Service
		err  error
		took time.Duration
	}
	res := make(chan outcome, 1)
	began := time.Now()
	go func() {
		s, err := open(context.Background(), dsn, log)
		res <- outcome{s, err, time.Since(began)}
	}()
	from := began
	if o.after != "" {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if done := logs.FilterMessage(startupStepDone).FilterField(zap.String("step", o.after)).All(); len(done) > 0 {
				from = done[0].Time
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: step %s did not finish within 30 s with PostgreSQL up", o.name, o.after)
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(time.Until(from.Add(o.delay)))
	stopped := time.Since(began) // the fast shutdown ends every session now, then checkpoints
	pg.Stop()
	time.Sleep(startupOutage)
	pg.Restart(t)
	var out outcome
	select {
	case out = <-res:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the start has not ended 60 s after PostgreSQL came back", o.name)
	}
	during = out.err != nil || out.took > stopped
	retried := map[string]int{}
	for _, e := range logs.FilterMessage(startupRetried).All() {
		retried[fmt.Sprint(e.ContextMap()["step"])]++
	}
	if out.err != nil {
		t.Errorf("%s: PostgreSQL stopped %v into the start (down %v): the replica exited: %v",
			o.name, stopped.Round(time.Millisecond), startupOutage, out.err)
		return false, during
	}
	defer out.s.Close()
	fp := "start-" + strings.NewReplacer("/", "-", "+", "-", "%", "", " ", "-").Replace(o.name)
	acc, err := out.s.Accept(context.Background(), []template.Alert{firing(fp, time.Now().UTC())})
	if err != nil {
		t.Errorf("%s: the replica came up but does not accept: %v", o.name, err)
		return false, during
	}
	r := waitRun(t, out.s, acc[0].RunID, "finished", isFinished)
	if r.Status != vocab.StatusSucceeded {
		t.Errorf("%s: the run after the start ended %s (%s), want succeeded", o.name, r.Status, r.Reason)
		return false, during
	}
	n.eventually(t, o.name+"'s thread closed", func() bool {
		return slices.ContainsFunc(n.closes, func(s notify.Summary) bool { return s.RunID == acc[0].RunID })
	})
	t.Logf("%s: PostgreSQL stopped %v into the start; the start ended after %v, retries by step %v; a run went through",
		o.name, stopped.Round(time.Millisecond), out.took.Round(time.Millisecond), retried)
	return true, during
}
