package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/playbooks/vllm"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// Webhook-to-verdict benchmark parameters: 20 runs, at most 4 in flight (the
// daemon's default runs.max_concurrent, so no run waits for a worker).
const (
	benchRuns      = 20
	benchInFlight  = 4
	benchAlertname = "BenchWebhookToVerdict"
)

// benchSample is one run's timings, each from the moment its webhook was sent.
type benchSample struct {
	pickup, verdict, finished time.Duration // run started, triage finished (the refined verdict), run finished
	first                     time.Duration // the first verdict recorded (preliminary, from the snapshot)
	preliminary, changed      bool          // the first was preliminary; the refined one differed
	inParent                  time.Duration // the thread's parent first showed a verdict
	steps                     map[string]time.Duration
	id                        string
	sent                      time.Time
}

// benchChannel is the stand-in's channel for the benchmark's threads.
const benchChannel = "C0BENCH001"

// verdictInParent waits (up to a minute: the channel's pacing may still be
// working through the end-of-run edits) until every run's parent has shown
// its verdict, and records when it first did: the revision of the parent
// whose text first carries the verdict id.
func verdictInParent(b *testing.B, stub *slackstub.Server, samples []benchSample) {
	want := 0
	for _, x := range samples {
		if x.steps != nil {
			want++
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		at := map[string]time.Time{}
		for _, m := range stub.Messages(benchChannel) {
			if m.Metadata == nil {
				continue
			}
			id, _ := m.Metadata.EventPayload["run_id"].(string)
			for _, rev := range m.Revisions {
				if strings.HasPrefix(rev.Text, "overload") { // the parent leads with the verdict
					at[id] = rev.At
					break
				}
			}
		}
		got := 0
		for i := range samples {
			if t, ok := at[samples[i].id]; ok && samples[i].steps != nil {
				samples[i].inParent = t.Sub(samples[i].sent)
				got++
			}
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d parents show the verdict after a minute\n%s", got, want, stub.Dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// BenchmarkWebhookToVerdict measures webhook receipt → first verdict recorded
// (the preliminary one, from the PromQL snapshot: the run's verdicts[0].at)
// and → the refined one (the triage step's finished_at), as distributions
// over 20 runs, with the whole stack real: vllmsim in the overload
// scenario (its VLLMQueueDeep alert firing in the real Prometheus), the daemon
// running the shipped queue-deep playbook. Only three lines of the playbook
// change: its match (a benchmark alertname, so the stack's own Alertmanager
// deliveries do not compete), its cooldown (which would skip 19 of the 20 runs)
// and its max_concurrent (4). Alerts are POSTed straight to the webhook, 4 in
// flight; each time runs from just before the POST to the triage step's
// finished_at (and the run's) as the daemon recorded them.
//
//	go test ./e2e -run '^$' -bench WebhookToVerdict -benchtime 1x
func BenchmarkWebhookToVerdict(b *testing.B) {
	dir := b.TempDir()
	pb := filepath.Join(dir, "bench-queue-deep.yaml")
	if err := os.WriteFile(pb, benchPlaybook(b), 0o644); err != nil {
		b.Fatal(err)
	}
	// The shipped playbooks `use:` the shipped presets: load them beside it.
	presets, err := vllm.FS.ReadFile("presets.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "presets.yaml"), presets, 0o644); err != nil {
		b.Fatal(err)
	}
	pb += ", " + filepath.Join(dir, "presets.yaml")
	// The thread goes to the strict Slack stand-in, so the figure includes
	// the outbox, the deliverer and the channel's pacing: what the on-call sees.
	stub := slackstub.New(b, slackstub.WithChannel(benchChannel, "alerts"))
	notify := fmt.Sprintf("notify:\n  slack:\n    enabled: true\n    token: xoxb-test\n    api_url: %q\n    channel: %s\n", stub.URL(), benchChannel)
	s := startStack(b, stackOptions{Scenarios: []string{vllmsim.ScenarioOverload}, DaemonConfig: "playbooks: [" + pb + "]\nshipped_playbooks: false\n" + notify})
	inst := s.Sims[vllmsim.ScenarioOverload].Addr
	waitFiring(b, s, "VLLMQueueDeep", inst, 2*time.Minute)
	b.ResetTimer()
	var samples []benchSample
	for i := 0; i < b.N; i++ {
		samples = append(samples, benchRound(b, s, inst, i)...)
	}
	b.StopTimer()
	verdictInParent(b, stub, samples)
	reportVerdictLatency(b, samples)
}

// benchPlaybook is the shipped queue-deep playbook with its match, cooldown and
// max_concurrent changed as BenchmarkWebhookToVerdict says, its tests dropped.
func benchPlaybook(b *testing.B) []byte {
	raw, err := vllm.FS.ReadFile("queue-deep.yaml")
	if err != nil {
		b.Fatal(err)
	}
	text := string(raw)
	if i := strings.Index(text, "\ntests:"); i >= 0 {
		text = text[:i+1]
	}
	edits := []struct{ re, repl string }{
		{`(?m)^(\s*- )alertname="VLLMQueueDeep"$`, `${1}alertname="` + benchAlertname + `"`},
		{`(?m)^\s*cooldown(_by)?:.*\n`, ``},
		{`(?m)^(\s*max_concurrent:) \d+$`, fmt.Sprintf("${1} %d", benchInFlight)},
	}
	for _, e := range edits {
		re := regexp.MustCompile(e.re)
		if !re.MatchString(text) {
			b.Fatalf("shipped queue-deep.yaml changed shape: no match for %s", e.re)
		}
		text = re.ReplaceAllString(text, e.repl)
	}
	return []byte(text)
}

// waitFiring waits until Prometheus holds the alert firing for the instance.
func waitFiring(b *testing.B, s *stack, alertname, inst string, within time.Duration) {
	b.Helper()
	q := fmt.Sprintf(`ALERTS{alertname=%q,instance=%q,alertstate="firing"}`, alertname, inst)
	deadline := time.Now().Add(within)
	for len(s.Prom.Query(b, q)) == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%s not firing for %s after %s", alertname, inst, within)
		}
		time.Sleep(time.Second)
	}
}

// benchRound sends benchRuns alerts, benchInFlight at a time, each waiting for
// its run to finish, and returns every run's timings.
func benchRound(b *testing.B, s *stack, inst string, round int) []benchSample {
	out := make([]benchSample, benchRuns)
	next := make(chan int, benchRuns) // filled up front: a worker that fails cannot block the rest
	for i := 0; i < benchRuns; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for w := 0; w < benchInFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fp := fmt.Sprintf("be%06x%08x", round, i)
				sent := time.Now()
				id := acceptedRun(b, postWebhook(b, s.API, firingAlert(benchAlertname, inst, fp))[0])
				out[i] = sampleOf(b, s.waitRun(b, id, 3*time.Minute), sent)
			}
		}()
	}
	wg.Wait()
	return out
}

// sampleOf reads one finished run's timings relative to sent, failing unless
// triage recorded the overload verdict.
func sampleOf(b *testing.B, r *runs.Run, sent time.Time) benchSample {
	tri := stepByKind(r, "triage")
	if tri == nil || tri.Status != vocab.StatusSucceeded || r.Verdict == nil || r.Verdict.ID != "overload" ||
		r.StartedAt == nil || r.FinishedAt == nil {
		b.Errorf("run without an overload verdict: %s", describe(r))
		return benchSample{}
	}
	smp := benchSample{id: r.ID, sent: sent, pickup: r.StartedAt.Sub(sent), verdict: tri.FinishedAt.Sub(sent),
		finished: r.FinishedAt.Sub(sent), steps: map[string]time.Duration{}}
	smp.first = smp.verdict
	if len(r.Verdicts) > 0 {
		first := r.Verdicts[0]
		smp.first, smp.preliminary = first.At.Sub(sent), first.Kind == runs.VerdictPreliminary
		smp.changed = r.Verdicts[len(r.Verdicts)-1].Change != ""
	}
	for _, st := range r.Steps {
		smp.steps[st.ID] = time.Duration(st.DurationMS) * time.Millisecond
	}
	return smp
}

// reportVerdictLatency prints p50/p90/max of each measure and what dominates.
func reportVerdictLatency(b *testing.B, samples []benchSample) {
	pick := func(f func(benchSample) time.Duration) []time.Duration {
		var ds []time.Duration
		for _, x := range samples {
			if x.steps != nil {
				ds = append(ds, f(x))
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds
	}
	verdict := pick(func(x benchSample) time.Duration { return x.verdict })
	if len(verdict) == 0 {
		b.Fatal("no run recorded a verdict")
	}
	first := pick(func(x benchSample) time.Duration { return x.first })
	prelim, changed := 0, 0
	for _, x := range samples {
		if x.steps != nil && x.preliminary {
			prelim++
		}
		if x.steps != nil && x.changed {
			changed++
		}
	}
	finished := pick(func(x benchSample) time.Duration { return x.finished })
	pickup := pick(func(x benchSample) time.Duration { return x.pickup })
	inParent := pick(func(x benchSample) time.Duration { return x.inParent })
	b.ReportMetric(0, "ns/op") // one op is a whole stack; the distribution below is the result
	b.ReportMetric(quantile(first, 0.5).Seconds(), "p50-first-verdict-s")
	b.ReportMetric(quantile(first, 0.99).Seconds(), "p99-first-verdict-s")
	b.ReportMetric(quantile(verdict, 0.5).Seconds(), "p50-verdict-s")
	b.ReportMetric(quantile(verdict, 0.99).Seconds(), "p99-verdict-s")
	b.ReportMetric(quantile(verdict, 0.9).Seconds(), "p90-verdict-s")
	b.ReportMetric(quantile(verdict, 1).Seconds(), "max-verdict-s")
	b.ReportMetric(quantile(finished, 0.5).Seconds(), "p50-finished-s")
	b.ReportMetric(quantile(pickup, 0.5).Seconds(), "p50-pickup-s")
	b.ReportMetric(quantile(inParent, 0.5).Seconds(), "p50-parent-verdict-s")
	b.ReportMetric(quantile(inParent, 0.99).Seconds(), "p99-parent-verdict-s")
	b.Logf("webhook → first verdict recorded over %d runs (%d in flight; %d preliminary, %d refined differently): p50 %s p90 %s p99 %s",
		len(first), benchInFlight, prelim, changed, secs(quantile(first, 0.5)), secs(quantile(first, 0.9)), secs(quantile(first, 0.99)))
	b.Logf("webhook → refined verdict recorded: p50 %s p99 %s", secs(quantile(verdict, 0.5)), secs(quantile(verdict, 0.99)))
	b.Logf("webhook → verdict over %d runs (%d in flight): p50 %s p90 %s max %s; → run finished p50 %s p90 %s max %s; → run started p50 %s max %s",
		len(verdict), benchInFlight, secs(quantile(verdict, 0.5)), secs(quantile(verdict, 0.9)), secs(quantile(verdict, 1)),
		secs(quantile(finished, 0.5)), secs(quantile(finished, 0.9)), secs(quantile(finished, 1)),
		secs(quantile(pickup, 0.5)), secs(quantile(pickup, 1)))
	b.Logf("webhook → first verdict visible in the Slack parent: p50 %s p90 %s max %s",
		secs(quantile(inParent, 0.5)), secs(quantile(inParent, 0.9)), secs(quantile(inParent, 1)))
	seen := map[string]bool{}
	var ids []string
	for _, x := range samples {
		for id := range x.steps {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		ds := pick(func(x benchSample) time.Duration { return x.steps[id] })
		parts = append(parts, fmt.Sprintf("%s %s/%s", id, secs(quantile(ds, 0.5)), secs(quantile(ds, 1))))
	}
	b.Logf("step durations p50/max: %s", strings.Join(parts, ", "))
}

// quantile is the nearest-rank q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
