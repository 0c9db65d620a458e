package triage

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// queueNumRE finds the queue depth an evidence line quotes.
var queueNumRE = regexp.MustCompile(`\bqueue (\d+)\b`)

// normal is an instance doing fine: chat traffic, no queue, KV mostly free.
var normal = vocab.Signals{
	vocab.SigQueueDepth: 0, vocab.SigRunning: 12, vocab.SigKVUsage: 0.05, vocab.SigPreemptionsRate: 0,
	vocab.SigTTFTP99: 0.3, vocab.SigTTFTP50: 0.07, vocab.SigITLP99: 0.06, vocab.SigQueueTimeMean: 0.02,
	vocab.SigPrefillMean: 0.05, vocab.SigDecodeMean: 4, vocab.SigPromptTokens: 320, vocab.SigAbortRatio: 0,
}

// with returns normal overridden by kv pairs (NaN-free); a negative value deletes.
func with(kv map[string]float64) vocab.Signals {
	s := vocab.Signals{}
	for k, v := range normal {
		s[k] = v
	}
	for k, v := range kv {
		if v < 0 {
			delete(s, k)
			continue
		}
		s[k] = v
	}
	return s
}

func TestDiagnoseVerdictsAndOverlaps(t *testing.T) {
	cases := []struct {
		name         string
		sig          vocab.Signals
		want         string
		contributing []string
		evidence     []string // substrings, in any line
	}{
		{"everything normal is healthy", normal, vocab.VerdictHealthy, nil, []string{"within its threshold", "queue 0"}},
		{"full pool with preemptions", with(map[string]float64{vocab.SigKVUsage: 0.98, vocab.SigPreemptionsRate: 2.2}),
			vocab.VerdictKVPressure, nil, []string{"KV cache 0.98 full (threshold 0.95)", "2.2 preemptions/s"}},
		{"preemptions prove a full pool even when the gauge just dropped", with(map[string]float64{vocab.SigKVUsage: 0.91, vocab.SigPreemptionsRate: 0.6}),
			vocab.VerdictKVPressure, nil, []string{"0.6 preemptions/s"}},
		{"a pool at its ceiling before the first preemption", with(map[string]float64{vocab.SigKVUsage: 0.97}),
			vocab.VerdictKVPressure, nil, []string{"preemption is next"}},
		{"deep queue, full batch, flat prefill is overload", with(map[string]float64{vocab.SigQueueDepth: 42, vocab.SigRunning: 32,
			vocab.SigQueueTimeMean: 30, vocab.SigPrefillMean: 0.1, vocab.SigTTFTP99: 40}),
			vocab.VerdictOverload, nil, []string{"queue 42 waiting (threshold 10); batch 32 running", "99.7% of the time to first token"}},
		{"a rare preemption under overload is not kv-pressure", with(map[string]float64{vocab.SigQueueDepth: 42, vocab.SigRunning: 32,
			vocab.SigQueueTimeMean: 30, vocab.SigPrefillMean: 0.1, vocab.SigTTFTP99: 40, vocab.SigKVUsage: 0.7, vocab.SigPreemptionsRate: 0.01}),
			vocab.VerdictOverload, nil, []string{"queue 42 waiting"}},
		{"overload that fills the pool is kv-pressure first", with(map[string]float64{vocab.SigQueueDepth: 42, vocab.SigQueueTimeMean: 30,
			vocab.SigKVUsage: 0.99, vocab.SigPreemptionsRate: 3}),
			vocab.VerdictKVPressure, []string{vocab.VerdictOverload}, []string{"KV cache 0.99", "queue 42 waiting"}},
		{"overload makes clients abort: aborts contribute", with(map[string]float64{vocab.SigQueueDepth: 1600, vocab.SigQueueTimeMean: 110,
			vocab.SigAbortRatio: 0.8, vocab.SigTTFTP99: 159}),
			vocab.VerdictOverload, []string{vocab.VerdictClientAborts}, []string{"80% of finished requests aborted"}},
		{"deep queue while long prompts prefill slowly is prefill-bound", with(map[string]float64{vocab.SigQueueDepth: 14,
			vocab.SigQueueTimeMean: 3, vocab.SigPrefillMean: 1.1, vocab.SigPromptTokens: 6000, vocab.SigTTFTP99: 5}),
			vocab.VerdictPrefillBound, nil, []string{"prompts 6,000 tokens", "prefill 1.1 s per request", "~5455 prompt tokens/s"}},
		{"long prompts with slow prefill", with(map[string]float64{vocab.SigPrefillMean: 0.9, vocab.SigPromptTokens: 5200, vocab.SigTTFTP99: 2.5,
			vocab.SigTTFTP99Baseline: 0.4}),
			vocab.VerdictPrefillBound, nil, []string{"TTFT p99 2.5 s (threshold 2 s) (before: 0.4 s)"}},
		{"no request finished: TTFT with an empty queue stands in for prefill", with(map[string]float64{vocab.SigPrefillMean: -1,
			vocab.SigPromptTokens: 6500, vocab.SigTTFTP50: 1.38, vocab.SigTTFTP99: 2.48}),
			vocab.VerdictPrefillBound, nil, []string{"TTFT p50 1.38 s with the queue short"}},
		{"long prompts served fast are no symptom", with(map[string]float64{vocab.SigPromptTokens: 5000, vocab.SigPrefillMean: 0.3}),
			vocab.VerdictHealthy, nil, nil},
		{"slow tokens in a wide batch is decode-bound", with(map[string]float64{vocab.SigITLP99: 0.3, vocab.SigRunning: 240}),
			vocab.VerdictDecodeBound, nil, []string{"ITL p99 0.3 s (threshold 0.2 s) with 240 requests in the batch (wide from 64)"}},
		{"slow tokens in a narrow batch is unexplained", with(map[string]float64{vocab.SigITLP99: 0.3, vocab.SigRunning: 9}),
			vocab.VerdictUnexplained, nil, []string{"ITL p99 0.3 s", "load normal: queue 0, batch 9 running, prompts 320 tokens, KV 0.05"}},
		{"slow prefill of short prompts under a queue is unexplained, not overload", with(map[string]float64{vocab.SigQueueDepth: 20,
			vocab.SigQueueTimeMean: 2, vocab.SigPrefillMean: 0.8, vocab.SigTTFTP99: 3}),
			vocab.VerdictUnexplained, nil, []string{"prefill 0.8 s per request", "~400 prompt tokens/s"}},
		{"unexplained slowness with aborting clients: the slowness is primary", with(map[string]float64{vocab.SigITLP99: 0.45,
			vocab.SigAbortRatio: 0.2}),
			vocab.VerdictUnexplained, []string{vocab.VerdictClientAborts}, []string{"20% of finished requests aborted"}},
		{"aborts with normal latency are the clients' own timeouts", with(map[string]float64{vocab.SigAbortRatio: 0.55}),
			vocab.VerdictClientAborts, nil, []string{"55% of finished requests aborted by clients (threshold 5%)"}},
		{"a missing signal is unknown, not abnormal", vocab.Signals{vocab.SigTTFTP99: 3},
			vocab.VerdictUnexplained, nil, []string{"TTFT p99 3 s", "not measured: queue_depth, running, kv_usage"}},
		{"no signals at all: no evidence, not unexplained (which would escalate)", vocab.Signals{},
			vocab.VerdictNoEvidence, nil, []string{"nothing measured: no tier-1 reading came through"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Diagnose(c.sig, DefaultThresholds)
			checkVerdict(t, v, c.want, c.contributing, c.evidence)
			if len(v.Advice) == 0 {
				t.Error("no advice")
			}
		})
	}
}

func TestDiagnoseAdviceSpeaksTheSeedsTerms(t *testing.T) {
	v := Diagnose(with(map[string]float64{vocab.SigKVUsage: 0.99, vocab.SigPreemptionsRate: 1}), DefaultThresholds)
	all := strings.Join(v.Advice, " ")
	for _, w := range []string{"--gpu-memory-utilization", "--max-num-seqs", "prefix caching", "add an instance"} {
		if !strings.Contains(all, w) {
			t.Errorf("kv-pressure advice lacks %q", w)
		}
	}
	for _, id := range vocab.Verdicts {
		if len(advice[id]) == 0 {
			t.Errorf("verdict %s has no advice", id)
		}
	}
}

func TestThresholdsAreConfigurable(t *testing.T) {
	deepish := with(map[string]float64{vocab.SigQueueDepth: 15, vocab.SigQueueTimeMean: 2})
	cases := []struct {
		name string
		th   Thresholds
		want string
	}{
		{"defaults: 15 waiting is deep", Thresholds{}, vocab.VerdictOverload},
		{"a queue threshold of 50", Thresholds{QueueDepth: 50}, vocab.VerdictHealthy},
		{"a KV threshold of 0.04 calls 0.05 pressure", Thresholds{KVUsage: 0.04}, vocab.VerdictKVPressure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step, err := New(Config{Thresholds: c.th})
			if err != nil {
				t.Fatal(err)
			}
			res, err := step.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{"scrape": {Signals: deepish}}})
			if err != nil || res.Verdict.ID != c.want {
				t.Fatalf("verdict %v, %v; want %s", res.Verdict, err, c.want)
			}
		})
	}
}

func TestNewTriageRejectsBadThresholds(t *testing.T) {
	for name, th := range map[string]Thresholds{
		"negative":       {TTFTP99: -1},
		"ratio above 1":  {KVUsage: 1.5},
		"share above 1":  {QueueShare: 2},
		"aborts above 1": {AbortRatio: 5},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{Thresholds: th})
			if vocab.Classify(err) != vocab.ReasonBadConfig {
				t.Fatalf("err = %v, want bad-config", err)
			}
		})
	}
}

func TestTriageMergesPromQLBeforeScrape(t *testing.T) {
	prior := map[string]*vocab.Result{
		"scrape":   {Findings: map[string]any{"source": vocab.SourceScrape}, Signals: vocab.Signals{vocab.SigKVUsage: 0.99, vocab.SigQueueDepth: 3, vocab.SigAbortRatio: 0.3}},
		"snapshot": {Findings: map[string]any{"source": vocab.SourcePromQL}, Signals: vocab.Signals{vocab.SigKVUsage: 0.5, vocab.SigAbortRatio: 0.01}},
		"chart":    {Summary: "a chart, no signals"},
	}
	step, _ := New(Config{})
	res, err := step.Run(context.Background(), &vocab.Input{Prior: prior})
	if err != nil {
		t.Fatal(err)
	}
	if res.Signals[vocab.SigAbortRatio] != 0.01 || res.Signals[vocab.SigQueueDepth] != 3 || res.Signals[vocab.SigKVUsage] != 0.99 {
		t.Fatalf("merged %v: with windows unknown PromQL's abort ratio must win, the scrape must fill the queue, and the fuller KV reading count", res.Signals)
	}
	if got := res.Findings["sources"]; !slices.Equal(got.([]string), []string{"snapshot", "scrape"}) {
		t.Fatalf("sources = %v", got)
	}
	step, _ = New(Config{From: []string{"scrape", "snapshot"}})
	res, _ = step.Run(context.Background(), &vocab.Input{Prior: prior})
	if res.Verdict.ID != vocab.VerdictKVPressure || res.Signals[vocab.SigAbortRatio] != 0.3 {
		t.Fatalf("with from: [scrape, snapshot] the scrape's abort ratio wins: %v %v", res.Verdict, res.Signals)
	}
	// With windows known, the shorter one wins whatever the order.
	prior["scrape"].Findings[vocab.FindingSignalWindows] = map[string]any{vocab.SigAbortRatio: 2.0}
	prior["snapshot"].Findings[vocab.FindingSignalWindows] = map[string]float64{vocab.SigAbortRatio: 120}
	step, _ = New(Config{From: []string{"snapshot", "scrape"}})
	res, _ = step.Run(context.Background(), &vocab.Input{Prior: prior})
	if o := res.Findings["origins"].(map[string]vocab.Origin)[vocab.SigAbortRatio]; res.Signals[vocab.SigAbortRatio] != 0.3 || o.Step != "scrape" || o.Window != 2 {
		t.Fatalf("the scrape's 2 s abort ratio must beat the snapshot's 2m: %v, origin %+v", res.Signals, o)
	}
	if !strings.HasPrefix(res.Summary, "kv-pressure (also client-aborts): KV cache 0.99") {
		t.Fatalf("summary = %q", res.Summary)
	}
	b, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(b), `"verdict":{"id":"kv-pressure"`) {
		t.Fatalf("run JSON: %s, %v", b, err)
	}
}

// checkEvidenceAgainstSignals fails when an evidence line contradicts the
// signals: a line calling the load normal (or every signal within its
// threshold) while a signal it speaks for is past its threshold.
func checkEvidenceAgainstSignals(t *testing.T, sig vocab.Signals, th Thresholds, v *vocab.Verdict) {
	t.Helper()
	th = th.withDefaults()
	load := map[string]bool{ // what "load normal" speaks for
		"queue": sig[vocab.SigQueueDepth] >= th.QueueDepth,
		"batch": sig[vocab.SigRunning] >= th.Running,
		// long against the instance's own past where a baseline exists
		"prompts":     reading{s: sig, th: th}.longPrompts(),
		"KV":          sig[vocab.SigKVUsage] >= th.KVUsage,
		"preemptions": sig[vocab.SigPreemptionsRate] > th.PreemptionsPerS,
	}
	all := map[string]bool{ // what "every tier-1 signal is within its threshold" speaks for
		"TTFT":   sig[vocab.SigTTFTP99] >= th.TTFTP99,
		"ITL":    sig[vocab.SigITLP99] >= th.ITLP99,
		"aborts": sig[vocab.SigAbortRatio] >= th.AbortRatio,
	}
	maps.Copy(all, load)
	for _, line := range v.Evidence {
		over := map[string]bool{}
		switch {
		case strings.Contains(line, "within its threshold"):
			over = all
		case strings.Contains(line, "normal"):
			over = load
		}
		for what, bad := range over {
			if bad {
				t.Errorf("%s: evidence %q calls the load normal beside %s past its threshold (signals %v)", v.ID, line, what, sig)
			}
		}
		// A number the line quotes for the queue is the signal's.
		if m := queueNumRE.FindStringSubmatch(line); m != nil {
			if q, ok := sig[vocab.SigQueueDepth]; !ok || m[1] != fmt.Sprintf("%.0f", q) {
				t.Errorf("%s: evidence %q quotes queue %s, the signal is %v", v.ID, line, m[1], sig[vocab.SigQueueDepth])
			}
		}
	}
}

// TestDiagnoseEachCauseAtOnsetAndSteady: every cause as the sources show it
// the moment its alert first fires and minutes later. At onset the lifecycle
// histograms (queue, prefill, decode time: observed at a request's finish)
// still describe the calm before; the gauges, first tokens/s and the scrape's
// seconds describe the cause. Values as vllmsim shows them (TestTriageAtOnset).
func TestDiagnoseEachCauseAtOnsetAndSteady(t *testing.T) {
	cases := []struct {
		name, want string
		sig        vocab.Signals
		untrusted  string // substring of Verdict.Untrusted, if any
	}{
		{"overload at onset: 48 waiting, the 2m histogram still calm", vocab.VerdictOverload, with(map[string]float64{
			vocab.SigQueueDepth: 48, vocab.SigRunning: 31, vocab.SigQueueTimeMean: 0.03, vocab.SigPrefillMean: 0.06, vocab.SigQueueTimeN: 330,
			vocab.SigAdmitRate: 3.4, vocab.SigQueueGrowth: 0.3, vocab.SigTTFTP99: 4.9, vocab.SigTTFTP50: 0.4}), "accounts for 0.1 of the 48 waiting"},
		{"overload at onset: a scrape gap in which 3 requests finished", vocab.VerdictOverload, with(map[string]float64{
			vocab.SigQueueDepth: 115, vocab.SigRunning: 32, vocab.SigQueueTimeMean: 0.02, vocab.SigPrefillMean: 0.07, vocab.SigQueueTimeN: 3,
			vocab.SigAdmitRate: 4.2, vocab.SigQueueGrowth: 9, vocab.SigTTFTP99: 6}), "3 requests finished in the window, 115 waiting"},
		{"overload at onset, no admitted rate: the lagging histogram does not block", vocab.VerdictOverload, with(map[string]float64{
			vocab.SigQueueDepth: 48, vocab.SigRunning: 31, vocab.SigQueueTimeMean: 0.03, vocab.SigPrefillMean: 0.06, vocab.SigQueueTimeN: 3, vocab.SigTTFTP99: 4.9}), "3 requests finished"},
		{"overload, nothing admitted in the window: the queue is stuck", vocab.VerdictOverload, with(map[string]float64{
			vocab.SigQueueDepth: 30, vocab.SigRunning: 32, vocab.SigAdmitRate: 0, vocab.SigQueueTimeMean: 0.02, vocab.SigPrefillMean: 0.07}), "accounts for 0 of the 30"},
		{"overload steady: histogram and Little's law agree", vocab.VerdictOverload, with(map[string]float64{
			vocab.SigQueueDepth: 440, vocab.SigRunning: 32, vocab.SigQueueTimeMean: 60, vocab.SigPrefillMean: 0.09, vocab.SigQueueTimeN: 520,
			vocab.SigAdmitRate: 4.4, vocab.SigTTFTP99: 79}), ""},
		{"kv-pressure at onset: at the ceiling, not yet preempting", vocab.VerdictKVPressure, with(map[string]float64{
			vocab.SigKVUsage: 0.984, vocab.SigPreemptionsRate: 0, vocab.SigRunning: 14, vocab.SigQueueDepth: 2}), ""},
		{"kv-pressure steady", vocab.VerdictKVPressure, with(map[string]float64{
			vocab.SigKVUsage: 0.97, vocab.SigPreemptionsRate: 1.2, vocab.SigRunning: 14, vocab.SigQueueDepth: 4, vocab.SigTTFTP99: 9.5}), ""},
		{"prefill-bound at onset: the scrape's first long prompts", vocab.VerdictPrefillBound, with(map[string]float64{
			vocab.SigPromptTokens: 2802, vocab.SigPrefillMean: 0.66, vocab.SigTTFTP50: 2.1, vocab.SigQueueDepth: 1, vocab.SigRunning: 13}), ""},
		{"prefill-bound at onset, no request finished: TTFT stands in", vocab.VerdictPrefillBound, with(map[string]float64{
			vocab.SigPromptTokens: 4600, vocab.SigPrefillMean: -1, vocab.SigTTFTP50: 1.5, vocab.SigTTFTP99: 2.4, vocab.SigQueueDepth: 1, vocab.SigRunning: 3}), ""},
		{"prefill-bound steady", vocab.VerdictPrefillBound, with(map[string]float64{
			vocab.SigPromptTokens: 5640, vocab.SigPrefillMean: 1.28, vocab.SigTTFTP99: 4.85, vocab.SigQueueDepth: 1, vocab.SigRunning: 3}), ""},
		{"decode-bound at onset", vocab.VerdictDecodeBound, with(map[string]float64{vocab.SigITLP99: 0.264, vocab.SigRunning: 239, vocab.SigQueueDepth: 6}), ""},
		{"decode-bound steady", vocab.VerdictDecodeBound, with(map[string]float64{vocab.SigITLP99: 0.397, vocab.SigRunning: 240, vocab.SigKVUsage: 0.52}), ""},
		{"client-aborts at onset", vocab.VerdictClientAborts, with(map[string]float64{vocab.SigAbortRatio: 0.59, vocab.SigRunning: 18}), ""},
		{"client-aborts steady", vocab.VerdictClientAborts, with(map[string]float64{vocab.SigAbortRatio: 0.56, vocab.SigRunning: 18}), ""},
		{"unexplained at onset", vocab.VerdictUnexplained, with(map[string]float64{vocab.SigITLP99: 0.299, vocab.SigRunning: 15}), ""},
		{"unexplained steady", vocab.VerdictUnexplained, with(map[string]float64{vocab.SigITLP99: 0.45, vocab.SigTTFTP99: 2.3, vocab.SigRunning: 12}), ""},
		{"a deep queue that drains at once is no overload, and not called normal", vocab.VerdictHealthy, with(map[string]float64{
			vocab.SigQueueDepth: 15, vocab.SigAdmitRate: 150, vocab.SigQueueTimeMean: 0.05}), ""},
		{"healthy", vocab.VerdictHealthy, normal, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Diagnose(c.sig, DefaultThresholds)
			if v.ID != c.want {
				t.Fatalf("verdict %s %v, want %s; evidence %q", v.ID, v.Contributing, c.want, v.Evidence)
			}
			got := strings.Join(v.Untrusted, " | ")
			if (c.untrusted == "") != (got == "") || !strings.Contains(got, c.untrusted) {
				t.Errorf("untrusted %q, want %q", got, c.untrusted)
			}
			if c.untrusted != "" && !strings.Contains(v.Evidence[len(v.Evidence)-1], "not trusted: ") {
				t.Errorf("the last evidence line does not say what was not trusted: %q", v.Evidence)
			}
			checkEvidenceAgainstSignals(t, c.sig, DefaultThresholds, v)
		})
	}
}

// TestEvidenceNeverContradictsTheSignals runs every rule outcome over a grid
// of signals around each threshold (below, at and well past it) and checks
// each verdict's evidence against its signals: no "load normal" or "within its
// threshold" beside a signal past its threshold, and every queue depth quoted
// is the signal's.
func TestEvidenceNeverContradictsTheSignals(t *testing.T) {
	type axis struct {
		name string
		vals []float64 // -1: absent
	}
	axes := []axis{
		{vocab.SigQueueDepth, []float64{-1, 0, 9, 10, 48}},
		{vocab.SigRunning, []float64{12, 64}},
		{vocab.SigKVUsage, []float64{0.1, 0.95}},
		{vocab.SigPreemptionsRate, []float64{0, 0.5}},
		{vocab.SigTTFTP99, []float64{-1, 0.3, 4.9}},
		{vocab.SigITLP99, []float64{0.05, 0.3}},
		{vocab.SigPrefillMean, []float64{-1, 0.06, 0.9}},
		{vocab.SigQueueTimeMean, []float64{-1, 0.03, 30}},
		{vocab.SigAdmitRate, []float64{-1, 0, 3.4, 500}},
		{vocab.SigQueueTimeN, []float64{-1, 3, 300}},
		{vocab.SigPromptTokens, []float64{320, 6000}},
		{vocab.SigAbortRatio, []float64{0, 0.2}},
	}
	seen := map[string]int{}
	// The GPU axis: not measured, or one GPU thermally throttled
	// (gpu-degraded is reachable only with a GPU view).
	hot := 990.0
	maxClock := 1980.0
	util := 1.0
	gpus := []beyond{{}, {gpu: &views.GPUView{Measured: true, GPUs: []views.GPUState{{GPU: "0", ClockEventsMeasured: true,
		ClockEvents: []string{"sw_thermal"}, SMClockMHz: &hot, SMClockMaxMHz: &maxClock, Util: &util}}}}}
	var walk func(i int, s vocab.Signals)
	walk = func(i int, s vocab.Signals) {
		if i == len(axes) {
			for _, vw := range gpus {
				v, _ := diagnose(s, nil, DefaultThresholds, false, vw)
				seen[v.ID]++
				checkEvidenceAgainstSignals(t, s, DefaultThresholds, v)
				if t.Failed() {
					t.FailNow()
				}
			}
			return
		}
		for _, x := range axes[i].vals {
			next := maps.Clone(s)
			if x >= 0 {
				next[axes[i].name] = x
			}
			walk(i+1, next)
		}
	}
	walk(0, vocab.Signals{vocab.SigTTFTP50: 0.2})
	// The grid starts from one signal; no signal at all is no-evidence.
	v, _ := diagnose(vocab.Signals{}, nil, DefaultThresholds, false, beyond{})
	seen[v.ID]++
	for _, id := range vocab.Verdicts {
		if seen[id] == 0 {
			t.Errorf("no combination reached %s: the grid does not cover every rule outcome (%v)", id, seen)
		}
	}
}

func TestNewThresholdsAreValidated(t *testing.T) {
	if _, err := New(Config{Thresholds: Thresholds{HistMinCoverage: 1.5}}); vocab.Classify(err) != vocab.ReasonBadConfig {
		t.Fatalf("hist_min_coverage 1.5: err = %v", err)
	}
	if _, err := New(Config{Thresholds: Thresholds{QueueWait: -1}}); vocab.Classify(err) != vocab.ReasonBadConfig {
		t.Fatalf("queue_wait -1: err = %v", err)
	}
	// A queue_wait of 20 s calls a 14 s wait (48 waiting at 3.4/s) no overload.
	onset := with(map[string]float64{vocab.SigQueueDepth: 48, vocab.SigAdmitRate: 3.4, vocab.SigPrefillMean: 0.06})
	if v := Diagnose(onset, Thresholds{QueueWait: 20}); v.ID == vocab.VerdictOverload {
		t.Fatalf("queue_wait 20: %s %q", v.ID, v.Evidence)
	}
	if v := Diagnose(onset, Thresholds{}); v.ID != vocab.VerdictOverload {
		t.Fatalf("default queue_wait: %s %q", v.ID, v.Evidence)
	}
}

// TestWideBatchOnset: the onset of decode-bound is a wave of clients (240
// within seconds). If the wave outruns admission and the queue pages, what is
// true at that second is overload (a request now waits seconds), and the
// verdict says so with decode-bound contributing, since the batch it builds is
// wide and slow; a queue as deep that admission drains within a second is no
// overload, and the wide slow batch is the verdict.
func TestWideBatchOnset(t *testing.T) {
	for _, c := range []struct {
		name, want, also string
		sig              vocab.Signals
	}{
		{"the wave queues: ~2 s of waiting now", vocab.VerdictOverload, vocab.VerdictDecodeBound, with(map[string]float64{
			vocab.SigQueueDepth: 40, vocab.SigRunning: 210, vocab.SigAdmitRate: 20, vocab.SigQueueTimeMean: 0.05, vocab.SigQueueTimeN: 4,
			vocab.SigPrefillMean: 0.15, vocab.SigITLP99: 0.31, vocab.SigTTFTP99: 2.2})},
		{"the wave drains: 12 waiting, 60 admitted/s", vocab.VerdictDecodeBound, "", with(map[string]float64{
			vocab.SigQueueDepth: 12, vocab.SigRunning: 230, vocab.SigAdmitRate: 60, vocab.SigPrefillMean: 0.15, vocab.SigITLP99: 0.31})},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Diagnose(c.sig, DefaultThresholds)
			if v.ID != c.want || (c.also != "" && !slices.Contains(v.Contributing, c.also)) {
				t.Fatalf("verdict %s %v, want %s with %q contributing; evidence %q", v.ID, v.Contributing, c.want, c.also, v.Evidence)
			}
			checkEvidenceAgainstSignals(t, c.sig, DefaultThresholds, v)
		})
	}
}

// checkVerdict fails the test unless v is want with exactly contributing and
// its evidence holds every one of evidence; it returns the evidence joined
// by " | " for the caller's further checks.
func checkVerdict(t *testing.T, v *vocab.Verdict, want string, contributing, evidence []string) string {
	t.Helper()
	if v.ID != want || !slices.Equal(v.Contributing, contributing) {
		t.Fatalf("verdict %s %v, want %s %v; evidence %q", v.ID, v.Contributing, want, contributing, v.Evidence)
	}
	all := strings.Join(v.Evidence, " | ")
	for _, e := range evidence {
		if !strings.Contains(all, e) {
			t.Errorf("evidence lacks %q: %s", e, all)
		}
	}
	return all
}

// TestTriageWithNothingMeasuredNamesWhy: when every tier-1 step failed or
// was not configured, the verdict is no-evidence (not unexplained, which the
// shipped playbooks escalate to traces and a profile), its evidence names
// what kept each step from measuring, and its advice says what to check.
func TestTriageWithNothingMeasuredNamesWhy(t *testing.T) {
	step, _ := New(Config{})
	res, err := step.Run(context.Background(), &vocab.Input{Prior: map[string]*vocab.Result{}, Missed: map[string]string{
		"snapshot": "not configured: no Prometheus (set prometheus.url)",
		"peers":    "not configured: no Prometheus (set prometheus.url)",
		"gpu":      "not configured: no Prometheus (set prometheus.url)",
		"scrape":   "refused: dial 10.0.0.7:8000: not in targets.allow",
	}})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verdict
	if v == nil || v.ID != vocab.VerdictNoEvidence {
		t.Fatalf("verdict %+v, want no-evidence", v)
	}
	want := []string{
		"nothing measured: no tier-1 reading came through (every metrics step failed or none ran), so nothing is explained or ruled out",
		// one absence, said once for the steps it kept out
		"gpu, peers, snapshot: not configured: no Prometheus (set prometheus.url)",
		"scrape: refused: dial 10.0.0.7:8000: not in targets.allow",
	}
	if len(v.Evidence) < len(want) || strings.Join(v.Evidence[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Errorf("evidence:\n%s\nwant first:\n%s", strings.Join(v.Evidence, "\n"), strings.Join(want, "\n"))
	}
	if advice := strings.Join(vocab.AllAdvice(v), " "); !strings.Contains(advice, "prometheus.url") || strings.Contains(advice, "escalate to traces") {
		t.Errorf("advice %q: want what to check, not an escalation", advice)
	}
	if !strings.HasPrefix(res.Summary, "no-evidence: nothing measured") {
		t.Errorf("summary %q", res.Summary)
	}
}
