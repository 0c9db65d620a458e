package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/autocapture/autocapture/internal/testkit/manifestcheck"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// The chaos proof (issue 15): 200 distinct alerts posted straight to three
// replicas of the real binary on one PostgreSQL while a seeded schedule
// SIGKILLs and restarts replicas at random moments and takes Prometheus,
// Jaeger, the S3 server, the Slack stand-in and PostgreSQL down once each.
// After everything is back and a bounded drain, every alert is one run in a
// final status, each run has one thread holding exactly the replies its
// record says, once each, no profiler was left recording or misused (the one
// repeat allowed: a stop whose answer a kill kept from being recorded, see
// checkChaosSim), no lease is held, and every artifact is in the bucket as
// the run's manifest says, none pending.
//
// AUTOCAPTURE_CHAOS_SEED=<n> replays a schedule (the seed is logged).
// AUTOCAPTURE_KEEP_LOGS=<folder> keeps every replica process's whole log there.

const (
	chaosAlerts   = 200
	chaosReplicas = 3
	chaosSims     = 4
	// chaosWindow is how long the alerts are spread over; the faults fall in it.
	chaosWindow = 36 * time.Second
	// chaosKills is how many times a replica is SIGKILLed.
	chaosKills = 6
	// chaosDrain bounds the wait, after the window, for every run to end
	// and every thread, upload and manifest to settle.
	chaosDrain = 90 * time.Second
	// chaosLease is runs.lease_timeout (heartbeat 500 ms). With 2 s a loaded
	// machine (a CPU hog beside go test -race -p 2) had renewals miss the
	// 1.5 s watchdog on live replicas: runs were interrupted and resumed
	// again and again ("after chaos1 stopped" with chaos1 alive, 5 resumes of
	// one run) and 46 runs had not ended 90 s after the window. 4 s leaves
	// the renewals 3.5 s: the test measures kills, not the margin.
	chaosLease = 4 * time.Second
	// chaosMaxRecording is what the sims hold a recording to: the frame
	// (1 s) plus a dead owner's lease expiry, the sweeper's grace and an
	// outage of PostgreSQL, with room on a loaded machine.
	chaosMaxRecording = 25 * time.Second
)

// chaosPlaybook: every alert gets a tier-1 http step on its instance, a 3 s
// http step on hold (a slowTarget's /slow: a run lives long enough for a kill
// to catch it), a PromQL query and a trace search; alerts labelled
// chaos_profile="yes" also a 1 s framed profile of their sim. Every step
// continues on error: a component down makes a step fail, never the run stop.
func chaosPlaybook(hold string) string {
	return fmt.Sprintf(`playbooks:
  - name: chaos
    continue: true
    match:
      - alertname="ChaosAlert"
    steps:
      - id: version
        timeout: 10s
        continue_on_error: true
        http: {path: /version}
      - id: hold
        timeout: 20s
        continue_on_error: true
        http: {url: "%s/slow"}
      - id: metrics
        timeout: 10s
        continue_on_error: true
        prometheus:
          queries:
            - name: up
              query: 'up'
      - id: traces
        timeout: 10s
        continue_on_error: true
        traces: {limit: 5}
  - name: chaos-profile
    match:
      - alertname="ChaosAlert"
      - chaos_profile="yes"
    steps:
      - id: profile
        timeout: 1m
        continue_on_error: true
        profile:
          duration: 1s
          stop_timeout: 10s
          collect: {dir: '{{ .Labels.profiler_dir }}'}
`, hold)
}

// chaosReplica is one daemon replica: its options (port, storage, replica
// name) are kept across restarts; procs are every process it ran, in order.
type chaosReplica struct {
	name  string
	o     *daemonOpts
	d     *daemon
	procs []*testenv.Process
	down  bool
	// started is when its current process was started.
	started time.Time
}

// chaosEnv is everything the chaos test runs against.
type chaosEnv struct {
	pg       *testenv.OwnPostgres
	dsn      string
	prom     *testenv.Prometheus
	jaeger   *testenv.Jaeger
	s3       *testenv.S3Server
	stub     *slackstub.Server
	sims     []*profSim
	replicas []*chaosReplica
	// selfExits counts replica processes that exited without being killed.
	selfExits int
}

// chaosSeed is AUTOCAPTURE_CHAOS_SEED, or a fresh seed.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("AUTOCAPTURE_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AUTOCAPTURE_CHAOS_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// startChaosEnv starts the components and the replicas.
func startChaosEnv(t *testing.T) *chaosEnv {
	t.Helper()
	e := &chaosEnv{pg: testenv.StartOwnPostgres(t)}
	dsn := e.pg.CreateDatabase(t, "chaos")
	e.dsn = dsn
	var addrs []string
	for i := range chaosSims {
		s := startProfSim(t, vllmsim.Options{Seed: uint64(11 + i), ProfilerFlushDelay: 200 * time.Millisecond,
			ProfilerLayers: 2, ProfilerMaxRecording: chaosMaxRecording})
		e.sims = append(e.sims, s)
		addrs = append(addrs, s.Addr)
	}
	e.prom = testenv.StartPrometheus(t, testenv.PrometheusOptions{ScrapeTargets: addrs})
	e.jaeger = testenv.StartJaeger(t)
	e.s3 = testenv.StartVersityGW(t)
	e.stub = newSlack(t)
	hold := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	t.Cleanup(hold.Close)
	secret := writeSecret(t, e.s3.SecretAccessKey)
	notify := slackNotify(e.stub) + "    post_skipped: true\n    pace: {per_second: 200, burst: 50}\n"
	for i := range chaosReplicas {
		name := fmt.Sprintf("chaos%d", i)
		r := &chaosReplica{name: name, o: &daemonOpts{Token: "chaos", DatabaseURL: dsn, Playbooks: chaosPlaybook(hold.URL),
			Notify: notify, Storage: s3Storage(e.s3, "chaos", "gzip", secret), LeaseTimeout: chaosLease,
			Runs:       fmt.Sprintf("  max_concurrent: 16\n  max_attempts: 10\n  replica: %s\n", name),
			Profiling:  "  max_concurrent: 8\n  max_per_hour: 1000\n  sweep_interval: 1s\n  stop_timeout: 10s\n",
			Prometheus: "  url: " + e.prom.URL + "\n  timeout: 3s\n",
			Traces:     "  backend: jaeger\n  url: " + e.jaeger.QueryURL + "\n  timeout: 3s\n"}}
		e.replicas = append(e.replicas, r)
		e.start(t, r, false)
	}
	// All three start before the first is waited for: their start-ups
	// (migrations take turns under an advisory lock) overlap.
	for _, r := range e.replicas {
		r.d.Proc.WaitHTTP(t, r.d.URL+"/-/ready", 60*time.Second)
	}
	return e
}

// start starts replica r on its port, storage and database, waiting for
// /-/ready when wait is set (a restart during PostgreSQL's outage cannot be
// ready until it is back; the schedule must not block on it).
func (e *chaosEnv) start(t *testing.T, r *chaosReplica, wait bool) {
	t.Helper()
	r.d = launchDaemon(t, r.o, "autocapture-"+r.name)
	r.procs = append(r.procs, r.d.Proc)
	r.down, r.started = false, time.Now()
	if wait {
		r.d.Proc.WaitHTTP(t, r.d.URL+"/-/ready", 60*time.Second)
	}
}

// supervise starts again, as Kubernetes would, a replica whose process
// exited without being killed (a replica started while PostgreSQL is down
// exits), a second after its last start.
func (e *chaosEnv) supervise(t *testing.T, start time.Time) {
	t.Helper()
	for _, r := range e.replicas {
		if r.down || !r.d.Proc.Exited() || time.Since(r.started) < time.Second {
			continue
		}
		last := strings.TrimSpace(r.d.Proc.Logs())
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		t.Logf("t+%5.1fs replica %s exited on its own (%v; last line: %.300s): starting it again",
			time.Since(start).Seconds(), r.name, r.d.Proc.Err(), last)
		e.selfExits++
		e.start(t, r, false)
	}
}

// chaosEvent is one scheduled fault or repair.
type chaosEvent struct {
	at   time.Duration
	what string
	do   func()
}

// chaosKill is one SIGKILL of a replica.
type chaosKill struct {
	replica *chaosReplica
	proc    *testenv.Process
	at      time.Time
}

// chaosAccepted is an alert as a replica accepted it.
type chaosAccepted struct {
	fingerprint, runID string
	at                 time.Time
	tries              int
}

func TestServeChaos(t *testing.T) {
	seed := chaosSeed(t)
	t.Logf("chaos seed %d (AUTOCAPTURE_CHAOS_SEED=%d replays this schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	e := startChaosEnv(t)
	t.Cleanup(func() { keepChaosLogs(t, e.replicas) })

	// The schedule: each component down once for 2–5 s, replicas killed
	// chaosKills times, each back 1–4 s later, all inside the window.
	var events []chaosEvent
	var kills []chaosKill
	killsPer := map[string]int{}
	outage := func(name string, stop, restart func()) {
		at := time.Duration(rng.Int64N(int64(chaosWindow - 8*time.Second)))
		down := 2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		events = append(events, chaosEvent{at, name + " down", func() { stop(); killsPer[name]++ }},
			chaosEvent{at + down, name + " up", restart})
	}
	outage("prometheus", func() { e.prom.Proc.Kill9() }, func() { e.prom.Restart(t) })
	outage("jaeger", func() { e.jaeger.Proc.Kill9() }, func() { e.jaeger.Restart(t) })
	outage("s3", func() { e.s3.Proc.Kill9() }, func() { e.s3.Restart(t) })
	outage("postgres", func() { e.pg.Stop() }, func() { e.pg.Restart(t) })
	// The stand-in is in-process: it refuses every call with 503 for the
	// outage, and for as long after applies posts but drops the answer.
	slackAt := time.Duration(rng.Int64N(int64(chaosWindow - 8*time.Second)))
	slackDown := 2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
	events = append(events, chaosEvent{slackAt, "slack down", func() {
		e.stub.Fail("*", slackstub.ServerError(503).For(slackDown))
		e.stub.Fail("chat.postMessage", slackstub.DropAfterApply().Fraction(0.5, seed).Between(time.Now().Add(slackDown), time.Now().Add(2*slackDown)))
		killsPer["slack"]++
	}})
	for range chaosKills {
		at := 2*time.Second + time.Duration(rng.Int64N(int64(chaosWindow-6*time.Second)))
		pick, back := rng.IntN(chaosReplicas), time.Second+time.Duration(rng.Int64N(int64(3*time.Second)))
		events = append(events, chaosEvent{at, "kill", func() {
			r := e.replicas[pick]
			live := 0
			for _, o := range e.replicas {
				if !o.down {
					live++
				}
			}
			if r.down || live < 2 { // keep one replica taking alerts
				return
			}
			r.down = true
			p := r.d.Proc
			p.Kill9()
			kills = append(kills, chaosKill{r, p, time.Now()})
			killsPer["replica"]++
			insertEvent(&events, chaosEvent{at + back, "restart " + r.name, func() { e.start(t, r, false) }})
		}})
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })

	// The alerts, posted by their own goroutine at an even pace, each to a
	// replica picked by the seeded generator and, when that one does not
	// take it, to the next, until one does.
	accepted := make([]chaosAccepted, chaosAlerts)
	var postErrs []string
	var postMu sync.Mutex
	posted := make(chan struct{})
	start := time.Now()
	starts := start.Add(-time.Minute)
	go func() {
		defer close(posted)
		prng := rand.New(rand.NewPCG(seed, 2))
		client := &http.Client{Timeout: 5 * time.Second}
		for i := range chaosAlerts {
			time.Sleep(time.Until(start.Add(time.Duration(i) * chaosWindow / chaosAlerts)))
			fp := fmt.Sprintf("c4a05%011x", i)
			body := alertsBody(chaosAlert(i, fp, e.sims[i%chaosSims], starts))
			a, err := postAnyReplica(client, e.replicas, prng.IntN(chaosReplicas), body, 60*time.Second)
			a.fingerprint = fp
			accepted[i] = a
			if err != nil {
				postMu.Lock()
				postErrs = append(postErrs, fmt.Sprintf("alert %d: %v", i, err))
				postMu.Unlock()
			}
		}
	}()

	// Run the schedule on the test goroutine.
	for len(events) > 0 {
		ev := events[0]
		events = events[1:]
		for d := time.Until(start.Add(ev.at)); d > 0; d = time.Until(start.Add(ev.at)) {
			time.Sleep(min(d, 200*time.Millisecond))
			e.supervise(t, start)
		}
		t.Logf("t+%5.1fs (%s) %s", time.Since(start).Seconds(), time.Now().Format("15:04:05.000"), ev.what)
		ev.do()
	}
	for {
		select {
		case <-posted:
		case <-time.After(200 * time.Millisecond):
			e.supervise(t, start)
			continue
		}
		break
	}
	windowEnd := time.Now()
	for _, msg := range postErrs {
		t.Error(msg)
	}
	if len(postErrs) > 0 {
		t.FailNow()
	}
	first, last := accepted[0].at, accepted[0].at
	retried := 0
	for _, a := range accepted {
		if a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
		if a.tries > 1 {
			retried++
		}
	}

	// Everything back: every replica running and ready.
	for _, r := range e.replicas {
		if r.down || r.d.Proc.Exited() {
			t.Logf("replica %s is not running at the end of the window (down %v, exited %v): starting it", r.name, r.down, r.d.Proc.Exited())
			e.start(t, r, false)
		}
	}
	for _, r := range e.replicas {
		r.d.Proc.WaitHTTP(t, r.d.URL+"/-/ready", 60*time.Second)
	}
	d := e.replicas[0].d

	// Drain: every run final, every upload uploaded, every thread closed.
	ids := map[string]string{} // run id → fingerprint
	for _, a := range accepted {
		if prev, ok := ids[a.runID]; ok {
			t.Errorf("alerts %s and %s were accepted as the same run %s", prev, a.fingerprint, a.runID)
		}
		ids[a.runID] = a.fingerprint
	}
	read := manifestcheck.Read(bucketReader(e.s3, "chaos"))
	var all []runs.Run
	drainDeadline := time.Now().Add(chaosDrain)
	for {
		var why string
		all, why = chaosSettled(t, d, e.stub, read)
		if why == "" {
			break
		}
		if time.Now().After(drainDeadline) {
			t.Fatalf("after a drain of %v: %s\njobs of unsettled runs:\n%s", chaosDrain, why, chaosJobs(t, e.dsn, why))
		}
		time.Sleep(500 * time.Millisecond)
	}
	drained := time.Now()
	time.Sleep(time.Second) // a doubled post would land by now

	// No alert lost, none doubled: 200 alerts, 200 runs, one each.
	if len(all) != chaosAlerts {
		t.Errorf("%d runs for %d distinct alerts", len(all), chaosAlerts)
	}
	byFP := map[string]int{}
	for _, r := range all {
		byFP[r.Fingerprint]++
		if ids[r.ID] != r.Fingerprint {
			t.Errorf("run %s (%s) is not the run its alert was accepted as (%q)", r.ID, r.Fingerprint, ids[r.ID])
		}
	}
	for _, a := range accepted {
		if byFP[a.fingerprint] != 1 {
			t.Errorf("alert %s has %d runs, want 1", a.fingerprint, byFP[a.fingerprint])
		}
	}

	// One thread per run, exactly the replies its record says, once each.
	threads := map[string][]slackstub.Message{}
	for _, m := range e.stub.Messages(slackChannel) {
		if m.Metadata != nil {
			if id, ok := m.Metadata.EventPayload["run_id"].(string); ok {
				threads[id] = append(threads[id], m)
			}
		}
	}
	statuses, resumed, attempts, uploads, profiled := map[vocab.Status]int{}, 0, 0, 0, map[string]int{}
	for _, r := range all {
		statuses[r.Status]++
		if r.Resumed > 0 {
			resumed++
		}
		if r.Attempts > 1 {
			attempts++
		}
		if len(r.Uploads) > 0 {
			uploads++
		}
		for _, s := range r.Steps {
			if s.ID == "profile" {
				why, _, _ := strings.Cut(s.Reason+s.Error, ":")
				profiled[string(s.Status)+" "+why]++
			}
		}
		if len(threads[r.ID]) != 1 {
			t.Errorf("run %s: %d thread parents, want 1", r.ID, len(threads[r.ID]))
			continue
		}
		checkChaosThread(t, r, threads[r.ID][0])
	}
	if len(threads) != len(all) {
		t.Errorf("%d threads for %d runs", len(threads), len(all))
	}

	// No profiler misused or left recording; no lease left.
	dupStops := 0
	for _, s := range e.sims {
		dupStops += checkChaosSim(t, d, s, all)
	}
	for _, r := range e.replicas {
		if ps := r.d.profiling(t); len(ps.Leases) != 0 {
			t.Errorf("replica %s: leases left: %+v", r.name, ps.Leases)
		}
	}

	// Every artifact in the bucket as the manifest says, none pending.
	objects := 0
	for i := range all {
		objects += checkChaosManifest(t, &all[i], read)
	}

	// The tallies.
	p50, pmax, measured := deathToResume(t, e.replicas, kills, all)
	chaosSpan := last.Sub(first)
	t.Logf("chaos: seed %d; %d alerts accepted over %.1fs = %.1f alerts/s held (%d needed another try or replica); window %.1fs, drained %.1fs after",
		seed, chaosAlerts, chaosSpan.Seconds(), float64(chaosAlerts-1)/chaosSpan.Seconds(), retried,
		windowEnd.Sub(start).Seconds(), drained.Sub(windowEnd).Seconds())
	t.Logf("chaos: kills/outages per component %v; runs %v; %d resumed (attempt > 1: %d); %d with late uploads; profile steps %v; %d artifacts checked in the bucket",
		killsPer, statuses, resumed, attempts, uploads, profiled, objects)
	t.Logf("chaos: %d replica processes exited on their own (started while PostgreSQL was down) and were started again; %d stops repeated (by a sweeper or a resumed attempt) after a stop whose answer was never recorded",
		e.selfExits, dupStops)
	t.Logf("chaos: replica death to its runs resuming: p50 %v, max %v over %d resumed runs", p50, pmax, measured)
	endToThread, slowest := runEndToThread(t, all, threads)
	ends := figuresOf(endToThread)
	t.Logf("chaos: run end (finished_at) to the thread saying so (parent edited, close/finished posted): %v (slowest: run %s)",
		ends, slowest)
	if ends.p99 > maxEndToThreadP99 {
		t.Errorf("run end → thread p99 %v, want ≤ %v (a ceiling from the lease, outage and backoff; issue 22's goal, 15 s, is the logged figure's): threads say their run ended too late (slowest: run %s)", ends.p99, maxEndToThreadP99, slowest)
		logRunLines(t, e.replicas, slowest)
	}
	if killsPer["replica"] == 0 {
		t.Error("no replica was killed: the schedule proves nothing")
	}
	if resumed == 0 {
		t.Error("no run was resumed: no kill caught a run")
	}
}

// chaosSettled returns every run of the test with its steps once all have
// ended, have their manifest, a closed thread and their uploads done; else
// what still waits.
func chaosSettled(t *testing.T, d *daemon, stub *slackstub.Server, read manifestcheck.Read) ([]runs.Run, string) {
	t.Helper()
	list := d.runsN(t, "ChaosAlert")
	if len(list) < chaosAlerts {
		return nil, fmt.Sprintf("%d of %d runs listed", len(list), chaosAlerts)
	}
	closed, uploadsSaid := map[string]bool{}, map[string]bool{}
	for _, m := range stub.Messages(slackChannel) {
		if m.Metadata == nil {
			continue
		}
		id, _ := m.Metadata.EventPayload["run_id"].(string)
		keys := strings.Join(replyKeys(m), " ")
		closed[id] = strings.Contains(keys, "close/finished")
		uploadsSaid[id] = strings.Contains(keys, "uploads/done/")
	}
	var waits []string
	for _, r := range list {
		switch {
		case !pfFinished(r.Status):
			waits = append(waits, fmt.Sprintf("run %s is %s (attempt %d)", r.ID, r.Status, r.Attempts))
		case r.Manifest == "":
			waits = append(waits, fmt.Sprintf("run %s (%s) has no manifest", r.ID, r.Status))
		case !closed[r.ID]:
			waits = append(waits, fmt.Sprintf("run %s (%s) has no close/finished reply", r.ID, r.Status))
		}
	}
	if len(waits) > 0 {
		return nil, fmt.Sprintf("%d runs wait, e.g. %s", len(waits), strings.Join(waits[:min(len(waits), 5)], "; "))
	}
	var all []runs.Run
	for _, r := range list {
		full := d.run(t, r.ID)
		for _, u := range full.Uploads {
			if u.State != "uploaded" {
				return nil, fmt.Sprintf("run %s: upload %s is %s after %d attempts (%s)", r.ID, u.Key, u.State, u.Attempts, u.LastError)
			}
		}
		if len(full.Uploads) > 0 {
			if !uploadsSaid[r.ID] {
				return nil, fmt.Sprintf("run %s: its thread does not say its uploads landed yet", r.ID)
			}
			if pendingInManifest(t, full.Manifest, read) {
				return nil, fmt.Sprintf("run %s: its manifest still lists pending artifacts", r.ID)
			}
		}
		all = append(all, full)
	}
	return all, ""
}

// pendingInManifest says whether the manifest under key lists an artifact
// pending or missing (false when it cannot be read: the check says why).
func pendingInManifest(t *testing.T, key string, read manifestcheck.Read) bool {
	t.Helper()
	m, ok := readManifest(t, key, read)
	if !ok {
		return false
	}
	for _, pb := range m.Playbooks {
		for _, st := range pb.Steps {
			for _, a := range st.Artifacts {
				if a.Pending || a.Missing {
					return true
				}
			}
		}
	}
	return false
}

// readManifest reads and decodes the manifest under key.
func readManifest(t *testing.T, key string, read manifestcheck.Read) (artifacts.Manifest, bool) {
	t.Helper()
	var m artifacts.Manifest
	raw, enc, err := read(key)
	if err != nil {
		return m, false
	}
	return m, json.Unmarshal(manifestcheck.Decode(t, raw, enc), &m) == nil
}

// chaosJobs lists the River jobs of the runs named in why, for a failure.
func chaosJobs(t *testing.T, dsn, why string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, kind, state, attempt, coalesce(attempted_at::text, ''), attempted_by::text, args::text, errors::text
		FROM river_job WHERE position(args->>'run_id' in $1) > 0 ORDER BY id`, why)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id int64
		var kind, state, at, by, args string
		var attempt int
		var errs *string
		if err := rows.Scan(&id, &kind, &state, &attempt, &at, &by, &args, &errs); err != nil {
			return err.Error()
		}
		e := ""
		if errs != nil {
			e = *errs
		}
		fmt.Fprintf(&b, "  job %d %s %s attempt %d at %s by %s %s %.300s\n", id, kind, state, attempt, at, by, args, e)
	}
	return b.String()
}

// checkChaosSim wants the sim's profiler idle with nothing left to write and
// no violation, except stops with nothing recording that the daemon could
// not have avoided: a repeat of a stop that had reached the server but whose
// answer never became durable (the owner was killed before its "stopped"
// write, or sent the stop while PostgreSQL was down and died before it came
// back), made by the sweeper or the run's resumed attempt, which find the
// lease still recording or stopping and must stop it. It returns how many
// such stops it allowed.
func checkChaosSim(t *testing.T, d *daemon, sim *profSim, all []runs.Run) int {
	t.Helper()
	st := sim.admin(t)
	if !st.Armed || st.State != "idle" || st.PendingWrites != 0 {
		t.Errorf("sim %s: profiler armed=%v state %q pending_writes %d, want armed, idle, none pending",
			sim.Addr, st.Armed, st.State, st.PendingWrites)
	}
	allowed := 0
	stops, starts := sim.callsTo("/stop_profile"), sim.callsTo("/start_profile")
	for _, r := range all {
		if r.Labels["instance"] != sim.Addr || r.Labels["chaos_profile"] != "yes" {
			continue
		}
		p := d.profile(t, r.ID)
		var acquired, recording time.Time
		stopped := false
		for _, e := range p.Events {
			switch {
			case e.Event == "acquired":
				acquired = e.At
			case e.Event == "recording":
				recording, stopped = e.At, false
			case e.Event == "stopped":
				stopped = true
			case (e.Event == "sweeper_stopping" || e.Event == "resumed" && e.Detail != "state stopped") && !recording.IsZero() && !stopped:
				explained := false
				for _, c := range stops {
					if c.At.After(recording) && c.At.Before(e.At) {
						explained = true // a stop had reached the server; its answer was never recorded
						break
					}
				}
				// The lease says recording before the start is sent, so a
				// replica killed between the two never leaves a profiler
				// running unrecorded; the sweeper's stop then finds the
				// server idle. Seen in a full CI run: no start_profile
				// reached the sim between the lease's acquisition and the
				// sweeper's stop.
				if !explained && !startedBetween(starts, acquired, e.At) {
					explained = true
				}
				if explained {
					allowed++
				}
			}
		}
	}
	for kind, n := range st.Violations {
		if n == 0 || (kind == vllmsim.ViolationStopWhileIdle && n <= allowed) {
			continue
		}
		t.Errorf("sim %s: %d %s violation(s) (%d repeated stops explained)", sim.Addr, n, kind, allowed)
		logProfileHistory(t, d, sim, all)
	}
	return st.Violations[vllmsim.ViolationStopWhileIdle]
}

// logProfileHistory logs, for a sim that counted a violation, the times it
// was sent starts and stops and the capture events of every run on it.
func logProfileHistory(t *testing.T, d *daemon, sim *profSim, all []runs.Run) {
	t.Helper()
	var calls []string
	for _, path := range []string{"/start_profile", "/stop_profile"} {
		for _, c := range sim.callsTo(path) {
			calls = append(calls, fmt.Sprintf("%s %s→%s", path, c.At.Format("15:04:05.000"), c.Done.Format("15:04:05.000")))
		}
	}
	sort.Strings(calls)
	t.Logf("sim %s calls: %s", sim.Addr, strings.Join(calls, "; "))
	for _, r := range all {
		if r.Labels["instance"] != sim.Addr || r.Labels["chaos_profile"] != "yes" {
			continue
		}
		p := d.profile(t, r.ID)
		var ev []string
		for _, e := range p.Events {
			ev = append(ev, fmt.Sprintf("%s %s by %s (%s)", e.At.Format("15:04:05.000"), e.Event, e.Actor, e.Detail))
		}
		if len(ev) > 0 {
			t.Logf("run %s (resumed %d): %s", r.ID, r.Resumed, strings.Join(ev, "; "))
		}
	}
}

// insertEvent adds ev to the schedule (sorted by time), after the events due
// no later.
func insertEvent(events *[]chaosEvent, ev chaosEvent) {
	i := sort.Search(len(*events), func(i int) bool { return (*events)[i].at > ev.at })
	*events = append((*events)[:i], append([]chaosEvent{ev}, (*events)[i:]...)...)
}

// chaosAlert is alert i: on sim's instance, every third one profiled.
func chaosAlert(i int, fp string, sim *profSim, startsAt time.Time) string {
	profile := "no"
	if i%3 == 0 {
		profile = "yes"
	}
	return fmt.Sprintf(`{"status":"firing","labels":{"alertname":"ChaosAlert","instance":%q,"profiler_dir":%q,"chaos_profile":%q,"chaos_idx":"%d"},`+
		`"annotations":{},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}`,
		sim.Addr, sim.Dir, profile, i, startsAt.UTC().Format(time.RFC3339Nano), fp)
}

// postAnyReplica posts body to replica first and, while none takes it, to
// the next ones in turn, until one answers 200 with a run id or timeout
// passes.
func postAnyReplica(client *http.Client, rs []*chaosReplica, first int, body []byte, timeout time.Duration) (chaosAccepted, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for try := 0; ; try++ {
		url := rs[(first+try)%len(rs)].o.Port
		req, err := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/hooks/alertmanager", url), bytes.NewReader(body))
		if err != nil {
			return chaosAccepted{}, err
		}
		req.Header.Set("Authorization", "Bearer chaos")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if id := runID(b); resp.StatusCode == 200 && id != "" {
				return chaosAccepted{runID: id, at: time.Now(), tries: try + 1}, nil
			}
			last = fmt.Sprintf("%d %.200s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return chaosAccepted{}, fmt.Errorf("no replica took it in %v (%d tries; last: %s)", timeout, try+1, last)
		}
		if (try+1)%len(rs) == 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// checkChaosThread wants the thread of run r to hold exactly the replies its
// record says, each once: one per step record, one per resume, the end, and
// the late uploads' notice when the run spooled.
func checkChaosThread(t *testing.T, r runs.Run, parent slackstub.Message) {
	t.Helper()
	want := map[string]bool{"close/finished": true}
	for _, s := range r.Steps {
		want["step/"+s.Plan+"/"+s.ID] = true
	}
	for n := 1; n <= r.Resumed; n++ {
		want[fmt.Sprintf("run/resumed/%d", n)] = true
	}
	got, files := map[string]int{}, map[string]int{}
	uploadsDone := 0
	for _, m := range parent.Replies {
		if m.Metadata == nil && len(m.Files) > 0 {
			// A reply's files, shared after it (a failed step's error in full).
			for _, f := range m.Files {
				if files[f.Title]++; files[f.Title] == 2 {
					t.Errorf("run %s: file %q shared twice in its thread", r.ID, f.Title)
				}
			}
			continue
		}
		k := ""
		if m.Metadata != nil {
			k, _ = m.Metadata.EventPayload["key"].(string)
		}
		got[k]++
		if strings.HasPrefix(k, "uploads/done/") {
			uploadsDone++
			continue
		}
		if !want[k] {
			var text []string
			for _, m := range parent.Replies {
				text = append(text, fmt.Sprintf("%q files %d", m.Text, len(m.Files)))
			}
			t.Errorf("run %s: thread reply %q its record does not explain; thread %v", r.ID, k, text)
		}
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("run %s: reply %s posted %d times, want once; thread %v", r.ID, k, got[k], replyKeys(parent))
		}
	}
	for k, n := range got {
		if n > 1 && !want[k] {
			t.Errorf("run %s: reply %s posted %d times", r.ID, k, n)
		}
	}
	if len(r.Uploads) > 0 && uploadsDone == 0 {
		t.Errorf("run %s spooled %d artifacts, all uploaded, but its thread never said so: %v", r.ID, len(r.Uploads), replyKeys(parent))
	}
	if len(r.Uploads) == 0 && uploadsDone > 0 {
		t.Errorf("run %s never spooled, but its thread says uploads landed: %v", r.ID, replyKeys(parent))
	}
}

// checkChaosManifest checks run r's manifest against the bucket
// (manifestcheck.Check) and wants no artifact in it pending or missing, and
// every upload of the run uploaded. It returns the artifacts checked.
func checkChaosManifest(t *testing.T, r *runs.Run, read manifestcheck.Read) int {
	t.Helper()
	n := manifestcheck.Check(t, r, read)
	m, ok := readManifest(t, r.Manifest, read)
	if !ok {
		return n // Check said why
	}
	for _, pb := range m.Playbooks {
		for _, st := range pb.Steps {
			for _, a := range st.Artifacts {
				if a.Pending || a.Missing {
					t.Errorf("run %s: the manifest lists %s pending=%v missing=%v after the drain", r.ID, a.Key, a.Pending, a.Missing)
				}
			}
		}
	}
	for _, u := range r.Uploads {
		if u.State != "uploaded" {
			t.Errorf("run %s: upload %s is %s", r.ID, u.Key, u.State)
		}
	}
	return n
}

// zapTime is the daemon's log timestamp layout (zapcore.ISO8601TimeEncoder).
const zapTime = "2006-01-02T15:04:05.000Z0700"

// deathToResume measures, for each run resumed after a kill, the time from
// the SIGKILL of the replica that last started it to its "Run started."
// with the next resume count, read from the replicas' logs. It returns the
// median and the maximum, and how many resumes it measured.
func deathToResume(t *testing.T, replicas []*chaosReplica, kills []chaosKill, all []runs.Run) (p50, pmax time.Duration, n int) {
	t.Helper()
	type start struct {
		at      time.Time
		resumed int
		proc    *testenv.Process
	}
	starts := map[string][]start{}
	for _, r := range replicas {
		for _, p := range r.procs {
			for _, line := range strings.Split(p.Logs(), "\n") {
				if !strings.Contains(line, "\tRun started.\t") {
					continue
				}
				ts, rest, _ := strings.Cut(line, "\t")
				at, err := time.Parse(zapTime, ts)
				if err != nil {
					continue
				}
				var f struct {
					Run     string `json:"run"`
					Resumed int    `json:"resumed"`
				}
				if i := strings.Index(rest, "{"); i < 0 || json.Unmarshal([]byte(rest[i:]), &f) != nil {
					continue
				}
				starts[f.Run] = append(starts[f.Run], start{at, f.Resumed, p})
			}
		}
	}
	killedAt := map[*testenv.Process]time.Time{}
	for _, k := range kills {
		killedAt[k.proc] = k.at
	}
	var ds []time.Duration
	for _, r := range all {
		ss := starts[r.ID]
		sort.Slice(ss, func(i, j int) bool { return ss[i].at.Before(ss[j].at) })
		for i := 1; i < len(ss); i++ {
			k, ok := killedAt[ss[i-1].proc]
			if ok && ss[i].resumed > ss[i-1].resumed && ss[i].at.After(k) {
				ds = append(ds, ss[i].at.Sub(k))
			}
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds)
}

// startedBetween says whether a start_profile call reached the sim in
// [from, to]; a zero from (no acquisition seen) counts as started.
func startedBetween(starts []profCall, from, to time.Time) bool {
	if from.IsZero() {
		return true
	}
	for _, c := range starts {
		if !c.At.Before(from) && !c.At.After(to) {
			return true
		}
	}
	return false
}
