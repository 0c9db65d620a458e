package vllmsim

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The SGLang signals: what an operator of an SGLang fleet reads during an
// incident, from the sim's SGLang series only (the families the shipped
// SGLang alert rules use), per scenario. The engine model and the scenarios
// are vLLM's; these tests show each cause moving the SGLang series its
// verdict needs.

// sglValue sums the series of family whose label name=val (all series when
// name is empty).
func sglValue(s *Sim, family, name, val string) float64 {
	r := s.sgl.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	v := 0.0
	for _, f := range r.fams {
		if f.name != family {
			continue
		}
		for _, se := range f.series {
			if name == "" || labelValue(f, se, name) == val {
				v += se.v
			}
		}
	}
	return v
}

func labelValue(f *pyFamily, se *pySeries, name string) string {
	for i, n := range f.labels {
		if n == name {
			return se.values[i]
		}
	}
	return ""
}

// sglHist is the cumulative histogram of family's series whose label
// name=val (all series when name is empty), summed.
func sglHist(s *Sim, family, name, val string) hist {
	r := s.sgl.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	var out hist
	for _, f := range r.fams {
		if f.name != family {
			continue
		}
		out.bounds = f.buckets
		out.counts = make([]float64, len(f.buckets)+1)
		for _, se := range f.series {
			if name != "" && labelValue(f, se, name) != val {
				continue
			}
			acc := 0.0
			for i, c := range se.counts {
				acc += c
				out.counts[i] += acc
			}
			out.sum += se.sum
		}
	}
	return out
}

// sglSignals are one window's SGLang signals.
type sglSignals struct {
	Scenario                string
	QueueMax, QueueMean     float64 // sglang:num_queue_reqs, sampled every 100 ms
	RunningMean             float64 // sglang:num_running_reqs
	UsageMax, UsageMean     float64 // sglang:token_usage
	RetractRate             float64 // rate(sglang:num_retracted_requests_total), per second
	TTFTp99                 float64 // sglang:time_to_first_token_seconds
	ITLp50, ITLp99          float64 // sglang:inter_token_latency_seconds (token-weighted)
	QueueP50, QueueP99      float64 // sglang:queue_time_seconds
	PrefillP50              float64 // sglang:per_stage_req_latency_seconds{stage="prefill_forward"}
	PromptPerReq            float64 // rate(prompt_tokens_total) / rate(num_requests_total)
	AbortRatio, FinishedPer float64 // rate(num_aborted_requests_total) / rate(num_requests_total); finished per second
	RealtimePrefillPerSec   float64 // rate(sglang:realtime_tokens_total{mode=~"prefill_.*"})
}

func (g sglSignals) String() string {
	return fmt.Sprintf("%-13s queue max %4.0f mean %6.1f | running %5.1f | usage max %.2f mean %.2f | retract %5.2f/s | TTFT p99 %6.2f | "+
		"ITL p50 %.3f p99 %.3f | queue time p50 %6.2f p99 %6.2f | prefill_forward p50 %5.2f | prompt/req %5.0f | abort %.2f | done %.1f/s | prefill tok %5.0f/s",
		g.Scenario, g.QueueMax, g.QueueMean, g.RunningMean, g.UsageMax, g.UsageMean, g.RetractRate, g.TTFTp99,
		g.ITLp50, g.ITLp99, g.QueueP50, g.QueueP99, g.PrefillP50, g.PromptPerReq, g.AbortRatio, g.FinishedPer, g.RealtimePrefillPerSec)
}

// measureSGLang advances s by d in 100 ms steps, sampling the gauges as a
// scrape would, and reports the window's signals from the SGLang series.
func measureSGLang(t *testing.T, s *Sim, d time.Duration) sglSignals {
	t.Helper()
	const tick = 100 * time.Millisecond
	type counters struct{ retract, prompt, reqs, aborts, prefill float64 }
	read := func() counters {
		return counters{
			retract: sglValue(s, "sglang:num_retracted_requests_total", "", ""),
			prompt:  sglValue(s, "sglang:prompt_tokens_total", "", ""),
			reqs:    sglValue(s, "sglang:num_requests_total", "", ""),
			aborts:  sglValue(s, "sglang:num_aborted_requests_total", "", ""),
			prefill: sglValue(s, "sglang:realtime_tokens_total", "mode", "prefill_compute") +
				sglValue(s, "sglang:realtime_tokens_total", "mode", "prefill_cache"),
		}
	}
	hists := func() map[string]hist {
		return map[string]hist{
			"ttft":    sglHist(s, "sglang:time_to_first_token_seconds", "", ""),
			"itl":     sglHist(s, "sglang:inter_token_latency_seconds", "", ""),
			"queue":   sglHist(s, "sglang:queue_time_seconds", "", ""),
			"prefill": sglHist(s, "sglang:per_stage_req_latency_seconds", "stage", "prefill_forward"),
		}
	}
	before, hb := read(), hists()
	sig := sglSignals{Scenario: s.State().Scenario}
	var n, queue, running, usage float64
	for elapsed := time.Duration(0); elapsed < d; elapsed += tick {
		s.Advance(tick)
		q, u := sglValue(s, "sglang:num_queue_reqs", "", ""), sglValue(s, "sglang:token_usage", "", "")
		n++
		queue += q
		usage += u
		running += sglValue(s, "sglang:num_running_reqs", "", "")
		sig.QueueMax, sig.UsageMax = max(sig.QueueMax, q), max(sig.UsageMax, u)
	}
	after, ha := read(), hists()
	secs := d.Seconds()
	sig.QueueMean, sig.RunningMean, sig.UsageMean = queue/n, running/n, usage/n
	sig.RetractRate = (after.retract - before.retract) / secs
	q := func(name string, p float64) float64 { return ha[name].minus(hb[name]).quantile(p) }
	sig.TTFTp99 = q("ttft", 0.99)
	sig.ITLp50, sig.ITLp99 = q("itl", 0.5), q("itl", 0.99)
	sig.QueueP50, sig.QueueP99 = q("queue", 0.5), q("queue", 0.99)
	sig.PrefillP50 = q("prefill", 0.5)
	if done := after.reqs - before.reqs; done > 0 {
		sig.PromptPerReq = (after.prompt - before.prompt) / done
		sig.AbortRatio = (after.aborts - before.aborts) / done
		sig.FinishedPer = done / secs
	}
	sig.RealtimePrefillPerSec = (after.prefill - before.prefill) / secs
	return sig
}

// runSGLang measures a scenario on a 2026 SGLang sim: the first 20 s and
// the 60 s after.
func runSGLang(t *testing.T, scenario string) (early, steady sglSignals) {
	t.Helper()
	s, err := New(Options{Engine: EngineSGLang, Scenario: scenario, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	early = measureSGLang(t, s, 20*time.Second)
	steady = measureSGLang(t, s, 60*time.Second)
	t.Logf("0–20 s   %v", early)
	t.Logf("20–80 s  %v", steady)
	return early, steady
}

// TestSGLangScenarioSignals: every cause moves the SGLang series its verdict
// reads, and leaves the others near healthy. Thresholds are the shipped
// vLLM alerts' (scenario_test.go), applied to the SGLang series the SGLang
// rules use.
func TestSGLangScenarioSignals(t *testing.T) {
	_, healthy := runSGLang(t, ScenarioHealthy)
	h := healthy
	t.Run(ScenarioHealthy, func(t *testing.T) {
		check(t, h.TTFTp99 < alertTTFT/2 && h.ITLp99 < alertITL*0.6, "healthy TTFT p99 %.2f, ITL p99 %.3f", h.TTFTp99, h.ITLp99)
		check(t, h.QueueMax < alertQueue/2 && h.UsageMax < 0.5, "healthy queue %v, usage %.2f", h.QueueMax, h.UsageMax)
		check(t, h.AbortRatio == 0 && h.RetractRate == 0, "healthy aborts %.2f, retractions %.2f/s", h.AbortRatio, h.RetractRate)
	})
	t.Run(ScenarioOverload, func(t *testing.T) {
		e, s := runSGLang(t, ScenarioOverload)
		check(t, e.QueueMax > alertQueue && e.TTFTp99 > alertTTFT, "num_queue_reqs %v and TTFT p99 %.2f within 20 s", e.QueueMax, e.TTFTp99)
		check(t, s.QueueP50 > 2*e.QueueP50 && s.QueueP50 > 10*math.Max(h.QueueP50, 0.01), "queue_time_seconds not growing: %.2f → %.2f (healthy %.3f)", e.QueueP50, s.QueueP50, h.QueueP50)
		check(t, s.RunningMean >= 0.9*float64(DefaultEngine.MaxNumSeqs), "num_running_reqs not at the cap: %.1f", s.RunningMean)
		check(t, s.UsageMax < 0.8 && s.RetractRate == 0 && s.ITLp99 < alertITL, "usage %.2f, retractions %.2f/s, ITL p99 %.3f", s.UsageMax, s.RetractRate, s.ITLp99)
	})
	t.Run(ScenarioKVPressure, func(t *testing.T) {
		e, s := runSGLang(t, ScenarioKVPressure)
		check(t, e.UsageMax > alertKV && e.RetractRate > 0, "token_usage %.2f and retractions %.2f/s within 20 s", e.UsageMax, e.RetractRate)
		check(t, s.UsageMean > 0.9 && s.RetractRate > 0.5, "steady token_usage %.2f, num_retracted_requests_total rate %.2f/s", s.UsageMean, s.RetractRate)
		check(t, s.QueueMax < alertQueue && s.ITLp99 < alertITL, "queue %v, ITL p99 %.3f", s.QueueMax, s.ITLp99)
	})
	t.Run(ScenarioPrefillBound, func(t *testing.T) {
		e, s := runSGLang(t, ScenarioPrefillBound)
		check(t, e.TTFTp99 > alertTTFT, "TTFT p99 %.2f within 20 s", e.TTFTp99)
		check(t, s.PromptPerReq > 4*h.PromptPerReq, "prompt tokens per request %.0f vs healthy %.0f", s.PromptPerReq, h.PromptPerReq)
		check(t, s.PrefillP50 > 5*h.PrefillP50, "prefill_forward p50 %.2f vs healthy %.2f", s.PrefillP50, h.PrefillP50)
		check(t, s.QueueMax < alertQueue && s.ITLp99 < alertITL && s.RetractRate == 0, "queue %v, ITL %.3f, retractions %.2f/s", s.QueueMax, s.ITLp99, s.RetractRate)
	})
	t.Run(ScenarioDecodeBound, func(t *testing.T) {
		e, s := runSGLang(t, ScenarioDecodeBound)
		check(t, s.ITLp99 > alertITL && s.ITLp50 > 2*h.ITLp50, "inter_token_latency p99 %.3f, p50 %.3f vs healthy %.3f", s.ITLp99, s.ITLp50, h.ITLp50)
		check(t, s.RunningMean > 4*float64(DefaultEngine.MaxNumSeqs), "batch not wide: %.0f running", s.RunningMean)
		check(t, s.QueueMax < alertQueue && e.QueueMax < 2*alertQueue, "queue %v (first 20 s %v)", s.QueueMax, e.QueueMax)
	})
	t.Run(ScenarioClientAborts, func(t *testing.T) {
		_, s := runSGLang(t, ScenarioClientAborts)
		check(t, s.AbortRatio > alertAbort, "num_aborted_requests_total / num_requests_total %.2f", s.AbortRatio)
		check(t, s.QueueMax < alertQueue && s.UsageMax < 0.8 && s.RetractRate == 0, "queue %v, usage %.2f, retractions %.2f/s", s.QueueMax, s.UsageMax, s.RetractRate)
	})
	t.Run(ScenarioUnexplained, func(t *testing.T) {
		_, s := runSGLang(t, ScenarioUnexplained)
		check(t, s.ITLp50 > 3*h.ITLp50 && s.PrefillP50 > 3*h.PrefillP50, "ITL p50 %.3f, prefill_forward p50 %.3f vs healthy %.3f, %.3f", s.ITLp50, s.PrefillP50, h.ITLp50, h.PrefillP50)
		check(t, s.QueueMax < alertQueue && s.UsageMax < 0.5 && s.RetractRate == 0 && s.AbortRatio == 0, "queue %v, usage %.2f, retractions %.2f, aborts %.2f", s.QueueMax, s.UsageMax, s.RetractRate, s.AbortRatio)
		check(t, s.PromptPerReq < 1.5*h.PromptPerReq, "prompts %.0f vs healthy %.0f", s.PromptPerReq, h.PromptPerReq)
	})
	t.Run(ScenarioGPUThrottled, func(t *testing.T) {
		_, s := runSGLang(t, ScenarioGPUThrottled)
		check(t, s.ITLp50 > 1.4*h.ITLp50, "ITL p50 %.3f vs healthy %.3f", s.ITLp50, h.ITLp50)
		check(t, s.QueueMax < alertQueue && s.UsageMax < 0.5 && s.RetractRate == 0, "queue %v, usage %.2f, retractions %.2f", s.QueueMax, s.UsageMax, s.RetractRate)
	})
}
