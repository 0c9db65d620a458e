package vllmsim

import (
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// signals are what a vLLM operator reads during an incident, measured from
// the sim's own /metrics registry the way the shipped alerts compute them
// (histogram_quantile over the cumulative buckets since the window start).
type signals struct {
	Scenario                  string
	WaitingMax, WaitingMean   float64
	RunningMean, RunningMax   float64
	KVMean, KVMax             float64
	PreemptRate               float64 // per second
	TTFTp50, TTFTp99          float64
	ITLp50, ITLp99            float64
	QueueP50, QueueP99        float64
	PrefillP50, PrefillP99    float64
	DecodeP50, DecodeP99      float64
	PromptMean                float64
	AbortRatio                float64
	FinishedRate, ArrivalRate float64
}

// hist is one cumulative histogram: upper bounds and counts.
type hist struct {
	bounds []float64
	counts []float64
	sum    float64
}

func (h hist) minus(o hist) hist {
	out := hist{bounds: h.bounds, counts: make([]float64, len(h.counts)), sum: h.sum - o.sum}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile is Prometheus' histogram_quantile: linear interpolation inside
// the bucket that holds the rank; the +Inf bucket answers its lower bound.
func (h hist) quantile(q float64) float64 {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return math.NaN()
	}
	total := h.counts[len(h.counts)-1]
	rank := q * total
	i := sort.Search(len(h.counts), func(i int) bool { return h.counts[i] >= rank })
	if i == len(h.bounds) { // +Inf
		return h.bounds[len(h.bounds)-1]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.bounds[i-1], h.counts[i-1]
	}
	inBucket := h.counts[i] - below
	if inBucket == 0 {
		return h.bounds[i]
	}
	return lower + (h.bounds[i]-lower)*(rank-below)/inBucket
}

// snapshot is the registry's families by name.
type snapshot map[string]*dto.MetricFamily

func takeSnapshot(t *testing.T, s *Sim) snapshot {
	t.Helper()
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := snapshot{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func (sn snapshot) hist(name string) hist {
	mf := sn[name]
	if mf == nil || len(mf.Metric) == 0 {
		return hist{}
	}
	h := mf.Metric[0].GetHistogram()
	out := hist{sum: h.GetSampleSum()}
	for _, b := range h.Bucket {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.counts = append(out.counts, float64(b.GetCumulativeCount()))
	}
	out.counts = append(out.counts, float64(h.GetSampleCount()))
	return out
}

// value sums a counter or gauge family's series whose label name=val (any
// series when name is empty).
func (sn snapshot) value(family, name, val string) float64 {
	mf := sn[family]
	if mf == nil {
		return 0
	}
	var v float64
	for _, m := range mf.Metric {
		match := name == ""
		for _, lp := range m.Label {
			if lp.GetName() == name && lp.GetValue() == val {
				match = true
			}
		}
		if !match {
			continue
		}
		if m.Counter != nil {
			v += m.Counter.GetValue()
		} else if m.Gauge != nil {
			v += m.Gauge.GetValue()
		}
	}
	return v
}

// measure advances s by d in 100 ms steps, sampling the gauges each step,
// and reports the signals of the whole window.
func measure(t *testing.T, s *Sim, d time.Duration) signals {
	t.Helper()
	const tick = 100 * time.Millisecond
	before := takeSnapshot(t, s)
	reqsBefore := len(s.Requests())
	var n, waitSum, runSum, kvSum float64
	sig := signals{Scenario: s.State().Scenario}
	for elapsed := time.Duration(0); elapsed < d; elapsed += tick {
		s.Advance(tick)
		st := s.State()
		n++
		waitSum += float64(st.Waiting)
		runSum += float64(st.Running)
		kvSum += st.KVUsage
		sig.WaitingMax = max(sig.WaitingMax, float64(st.Waiting))
		sig.RunningMax = max(sig.RunningMax, float64(st.Running))
		sig.KVMax = max(sig.KVMax, st.KVUsage)
	}
	after := takeSnapshot(t, s)
	sig.WaitingMean, sig.RunningMean, sig.KVMean = waitSum/n, runSum/n, kvSum/n
	secs := d.Seconds()
	sig.PreemptRate = (after.value("vllm:num_preemptions_total", "", "") - before.value("vllm:num_preemptions_total", "", "")) / secs
	q := func(name string, p float64) float64 { return after.hist(name).minus(before.hist(name)).quantile(p) }
	itl := "vllm:inter_token_latency_seconds"
	if s.opts.LegacyMetrics {
		itl = "vllm:time_per_output_token_seconds"
	}
	sig.TTFTp50, sig.TTFTp99 = q("vllm:time_to_first_token_seconds", 0.5), q("vllm:time_to_first_token_seconds", 0.99)
	sig.ITLp50, sig.ITLp99 = q(itl, 0.5), q(itl, 0.99)
	sig.QueueP50, sig.QueueP99 = q("vllm:request_queue_time_seconds", 0.5), q("vllm:request_queue_time_seconds", 0.99)
	sig.PrefillP50, sig.PrefillP99 = q("vllm:request_prefill_time_seconds", 0.5), q("vllm:request_prefill_time_seconds", 0.99)
	sig.DecodeP50, sig.DecodeP99 = q("vllm:request_decode_time_seconds", 0.5), q("vllm:request_decode_time_seconds", 0.99)
	ph := after.hist("vllm:request_prompt_tokens").minus(before.hist("vllm:request_prompt_tokens"))
	if c := ph.counts[len(ph.counts)-1]; c > 0 {
		sig.PromptMean = ph.sum / c
	}
	done := after.value("vllm:request_success_total", "", "") - before.value("vllm:request_success_total", "", "")
	aborts := after.value("vllm:request_success_total", "finished_reason", "abort") - before.value("vllm:request_success_total", "finished_reason", "abort")
	if done > 0 {
		sig.AbortRatio = aborts / done
	}
	sig.FinishedRate = done / secs
	sig.ArrivalRate = float64(len(s.Requests())-reqsBefore) / secs
	return sig
}

func (g signals) String() string {
	return fmt.Sprintf("%-13s waiting max %5.0f mean %6.1f | running mean %5.1f max %3.0f | KV mean %.2f max %.2f | preempt %5.2f/s | "+
		"TTFT p50 %6.3f p99 %6.3f | ITL p50 %.3f p99 %.3f | queue p50 %6.2f p99 %6.2f | prefill p50 %5.2f p99 %5.2f | "+
		"decode p50 %5.1f p99 %5.1f | prompt %5.0f | abort %.2f | done %.1f/s",
		g.Scenario, g.WaitingMax, g.WaitingMean, g.RunningMean, g.RunningMax, g.KVMean, g.KVMax, g.PreemptRate,
		g.TTFTp50, g.TTFTp99, g.ITLp50, g.ITLp99, g.QueueP50, g.QueueP99, g.PrefillP50, g.PrefillP99,
		g.DecodeP50, g.DecodeP99, g.PromptMean, g.AbortRatio, g.FinishedRate)
}
