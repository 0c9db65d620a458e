package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks/vllm"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// Stop-to-report benchmark parameters: captures per op, one after another
// (one server, max_concurrent 1: a capture holds its target until collected).
const (
	stopBenchRuns      = 6
	stopBenchAlertname = "BenchStopToReport"
	stopBenchPlaybook  = "e2e-bench-profile"
	stopBenchChannel   = "C0PROF0001"
)

// stopSample is one capture's times on the daemon's (and the stand-in's)
// clock: this machine's.
type stopSample struct {
	run      string
	stopped  time.Time // stop_profile answered: findings until + stop_seconds
	recorded time.Time // the step's finished_at
	inThread time.Time // the profile reply first posted in the thread
	frame    time.Duration
	stop     time.Duration
	step     time.Duration
}

// BenchmarkStopToReport measures, over 6 captures, the time from the
// unexplained sim's stop_profile answering to the profile step's reply
// (top family, shares, baseline) appearing in the Slack thread: collecting
// the files through the real agent, reading them, storing them in MinIO, the
// report, the step's record, the outbox and the Slack notifier with its
// pacing, into the strict stand-in. The step is the shipped vllm-profile
// preset's profile step as shipped (5 s frame, agent on the host's :9101,
// remove_after_upload) with its cooldown and `when` dropped so captures can
// follow each other (the `when` needs triage; this figure starts at the stop).
// "stop answered" is the step's own record: findings.until (the frame's end,
// just before stop_profile is sent) + stop_seconds (the stop's round trip);
// it precedes the real answer by the lease write before the stop (~ms), so
// the figure errs long.
//
//	go test ./e2e -run '^$' -bench StopToReport -benchtime 1x
func BenchmarkStopToReport(b *testing.B) {
	bucket := testenv.StartMinIO(b)
	stub := slackstub.New(b, slackstub.WithChannel(stopBenchChannel, "alerts"))
	// storm.window 0: no fleet thread, so every capture's alert gets a thread
	// of its own with the full profile reply, as a lone page does (six alerts
	// of one model within a minute would otherwise share one thread, members
	// posting a one-line reply each).
	notify := fmt.Sprintf("notify:\n  storm: {window: 0s}\n  slack:\n    enabled: true\n    token: xoxb-test\n    api_url: %q\n    channel: %s\n", stub.URL(), stopBenchChannel)
	ps := startProfileStack(b, profileStackOptions{
		Scenarios: []string{vllmsim.ScenarioUnexplained}, S3: bucket,
		Playbooks: func(map[string]string) map[string]string {
			return map[string]string{"bench-profile.yaml": stopBenchPlaybookYAML(b)}
		},
		Profiling:    "  max_per_hour: 100\n", // 6 captures back to back; the default is 6 an hour
		DaemonConfig: notify,
	})
	sm := ps.Sims[vllmsim.ScenarioUnexplained]
	time.Sleep(3 * time.Second) // traffic under way
	b.ResetTimer()
	var samples []stopSample
	for i := 0; i < b.N; i++ {
		for j := 0; j < stopBenchRuns; j++ {
			al := firingAlert(stopBenchAlertname, sm.Addr, fmt.Sprintf("bp%06x%08x", i, j))
			al.Labels["model_name"] = profileModel
			r := ps.waitRun(b, acceptedRun(b, postWebhook(b, ps.API, al)[0]), 3*time.Minute)
			st := stepByKind(r, "profile")
			if st == nil || st.Status != vocab.StatusSucceeded || st.Findings["top_family"] == nil {
				b.Fatalf("capture %d: %s\n%v", j, describe(r), stepFindings(st))
			}
			since, until := findingsTime(b, st, "since"), findingsTime(b, st, "until")
			stop := time.Duration(st.Findings["stop_seconds"].(float64) * float64(time.Second))
			samples = append(samples, stopSample{run: r.ID, stopped: until.Add(stop), recorded: st.FinishedAt,
				frame: until.Sub(since), stop: stop, step: st.FinishedAt.Sub(st.StartedAt)})
		}
	}
	b.StopTimer()
	profileRepliesInThread(b, stub, samples)
	reportStopToReport(b, samples)
}

// stopBenchPlaybookYAML is a playbook of one step: the shipped vllm-profile
// preset's profile step, its cooldown and when removed.
func stopBenchPlaybookYAML(b testing.TB) string {
	raw, err := vllm.FS.ReadFile("presets.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var doc struct {
		Presets []struct {
			Name  string           `yaml:"name"`
			Steps []map[string]any `yaml:"steps"`
		} `yaml:"presets"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	var step map[string]any
	for _, p := range doc.Presets {
		if p.Name == "vllm-profile" && len(p.Steps) == 1 {
			step = p.Steps[0]
		}
	}
	prof, _ := step["profile"].(map[string]any)
	if prof == nil || prof["cooldown"] == nil || step["when"] == nil {
		b.Fatalf("shipped vllm-profile preset changed shape: %v", step)
	}
	delete(prof, "cooldown")
	delete(step, "when")
	out, err := yaml.Marshal(map[string]any{"playbooks": []any{map[string]any{
		"name": stopBenchPlaybook, "description": "the shipped profile step, back to back",
		"match": []string{`alertname="` + stopBenchAlertname + `"`}, "timeout": "15m", "steps": []any{step},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
}

// profileRepliesInThread waits (up to a minute) for every capture's profile
// reply in the stand-in and records when it was first posted.
func profileRepliesInThread(b *testing.B, stub *slackstub.Server, samples []stopSample) {
	key := "step/" + stopBenchPlaybook + "/profile"
	deadline := time.Now().Add(time.Minute)
	for {
		at := map[string]time.Time{}
		for _, m := range stub.Messages(stopBenchChannel) {
			for _, r := range m.Replies {
				md := r.Revisions[0].Metadata
				if md == nil || md.EventPayload["key"] != key {
					continue
				}
				id, _ := md.EventPayload["run_id"].(string)
				at[id] = r.Revisions[0].At
			}
		}
		got := 0
		for i := range samples {
			if t, ok := at[samples[i].run]; ok {
				samples[i].inThread = t
				got++
			}
		}
		if got == len(samples) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d profile replies in the thread after a minute\n%s", got, len(samples), stub.Dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// reportStopToReport prints p50 and max of stop answered → reply in the
// thread, and its two parts.
func reportStopToReport(b *testing.B, samples []stopSample) {
	pick := func(f func(stopSample) time.Duration) []time.Duration {
		var ds []time.Duration
		for _, x := range samples {
			ds = append(ds, f(x))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds
	}
	total := pick(func(x stopSample) time.Duration { return x.inThread.Sub(x.stopped) })
	collect := pick(func(x stopSample) time.Duration { return x.recorded.Sub(x.stopped) })
	deliver := pick(func(x stopSample) time.Duration { return x.inThread.Sub(x.recorded) })
	stop := pick(func(x stopSample) time.Duration { return x.stop })
	step := pick(func(x stopSample) time.Duration { return x.step })
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(quantile(total, 0.5).Seconds(), "p50-stop-to-thread-s")
	b.ReportMetric(quantile(total, 1).Seconds(), "max-stop-to-thread-s")
	b.Logf("stop_profile answered → profile reply in the thread over %d captures: p50 %s max %s", len(total), secs(quantile(total, 0.5)), secs(quantile(total, 1)))
	b.Logf("  of which stop answered → step recorded (collect via agent, analysis, S3, report): p50 %s max %s; step recorded → in thread (outbox, Slack): p50 %s max %s",
		secs(quantile(collect, 0.5)), secs(quantile(collect, 1)), secs(quantile(deliver, 0.5)), secs(quantile(deliver, 1)))
	b.Logf("the profile step: p50 %s max %s (frame %s; stop_profile p50 %s max %s: the sim's 2 s flush)",
		secs(quantile(step, 0.5)), secs(quantile(step, 1)), samples[0].frame.Round(time.Millisecond), secs(quantile(stop, 0.5)), secs(quantile(stop, 1)))
}
