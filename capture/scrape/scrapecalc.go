package scrape

import (
	"math"
	"time"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/vocab"
	dto "github.com/prometheus/client_model/go"
)

// Delta is what two scrapes of one instance say about the time between
// them. With Prev nil (one scrape only), histograms and ratios cover the whole
// life of the process and no rate can be computed; gauges are always the
// latest reading.
type Delta struct {
	Prev *exposition.Exposition // the first scrape; nil with one scrape only
	Cur  exposition.Exposition  // the last scrape
	Gap  time.Duration          // the time between them
}

// counterDelta is cur − prev of a counter summed over its series (filtered by
// keep); a reset (cur < prev) counts everything cur has.
func (d Delta) counterDelta(m exposition.Metric, keep func(map[string]string) bool) (float64, bool) {
	now, ok := d.Cur.Value(m, exposition.AggSum, keep)
	if !ok {
		return 0, false
	}
	if d.Prev == nil {
		return now, true
	}
	before, ok := d.Prev.Value(m, exposition.AggSum, keep)
	if !ok || now < before {
		return now, true
	}
	return now - before, true
}

// finished is how many requests finished between the scrapes, in the
// engine's dialect.
func (d Delta) finished() (float64, bool) {
	if EngineOf(d.Cur) == vocab.EngineSGLang {
		return d.sglangFinished()
	}
	return d.counterDelta(exposition.VMFinished, nil)
}

// Rate is counterDelta per second of gap; only with two scrapes.
func (d Delta) Rate(m exposition.Metric, keep func(map[string]string) bool) (float64, bool) {
	if d.Prev == nil || d.Gap <= 0 {
		return 0, false
	}
	v, ok := d.counterDelta(m, keep)
	if !ok {
		return 0, false
	}
	return v / d.Gap.Seconds(), true
}

// Hist returns a histogram's observations over the gap.
func (d Delta) Hist(m exposition.Metric) (exposition.Histogram, bool) { return d.HistWhere(m, nil) }

// HistWhere returns the observations over the gap of a histogram's series
// that pass keep (nil keeps all).
func (d Delta) HistWhere(m exposition.Metric, keep func(map[string]string) bool) (exposition.Histogram, bool) {
	h, ok := d.Cur.HistogramWhere(m, keep)
	if !ok {
		return exposition.Histogram{}, false
	}
	if d.Prev != nil {
		if before, ok := d.Prev.HistogramWhere(m, keep); ok {
			h = h.Since(before)
		}
	}
	return h, true
}

// minObservationsP99 is the fewest observations a p99 is reported from: below
// it the "p99" is just the slowest one or two requests (a warm-up outlier on an
// idle server), which no operator would read as a tail.
const minObservationsP99 = 20

// Signals computes the canonical signals. Latency signals need observations in
// the gap (p99 at least minObservationsP99): a gap in which no request finished
// says nothing about latency, and the lifetime histogram would be a misleading
// stand-in.
func (d Delta) Signals() vocab.Signals {
	if EngineOf(d.Cur) == vocab.EngineSGLang {
		return d.sglangSignals()
	}
	s := d.gaugesOnly()
	for _, hs := range exposition.HistogramSignals {
		h, ok := d.Hist(hs.Metric)
		if !ok || h.Count <= 0 {
			continue
		}
		setIf(s, hs.Mean, h.Mean)
		if h.Count >= minObservationsP99 {
			setIf(s, hs.P99, func() (float64, bool) { return h.Quantile(0.99) })
		}
		setIf(s, hs.P50, func() (float64, bool) { return h.Quantile(0.5) })
	}
	setIf(s, vocab.SigPromptTokensNow, d.promptTokensPerStart)
	if _, ok := s[vocab.SigPromptTokens]; !ok {
		setIf(s, vocab.SigPromptTokens, d.promptTokensPerStart)
	}
	if v, ok := d.Rate(exposition.VMPreemptions, nil); ok {
		s[vocab.SigPreemptionsRate] = v
	}
	isAbort := func(ls map[string]string) bool { return ls["finished_reason"] == exposition.FinishedReasonAbort }
	all, okAll := d.counterDelta(exposition.VMFinished, nil)
	aborted, okAbort := d.counterDelta(exposition.VMFinished, isAbort)
	if okAll && okAbort && all > 0 {
		s[vocab.SigAbortRatio] = aborted / all
	}
	if v, ok := d.Rate(exposition.VMFinished, nil); ok {
		s[vocab.SigRequestRate] = v
	}
	d.queueNow(s)
	q, okQ := d.counterDelta(exposition.VMPrefixQuery, nil)
	h, okH := d.counterDelta(exposition.VMPrefixHits, nil)
	if okQ && okH && q > 0 {
		s[vocab.SigPrefixHitRatio] = h / q
	}
	return s
}

// queueNow adds what the gap says about the queue as it is now, counted as it
// happens rather than at each request's finish: how fast the waiting gauge
// moved, how many requests per second reached their first token (the rate the
// queue drains at; TTFT is observed at the first token, so it does not lag
// like the lifecycle histograms), and how many requests the queue-time
// histogram covers, so triage can weigh it. Only with two scrapes.
func (d Delta) queueNow(s vocab.Signals) {
	if d.Prev == nil || d.Gap <= 0 {
		return
	}
	now, okNow := d.Cur.Value(exposition.VMWaiting, exposition.AggSum, nil)
	before, okBefore := d.Prev.Value(exposition.VMWaiting, exposition.AggSum, nil)
	if okNow && okBefore {
		s[vocab.SigQueueGrowth] = (now - before) / d.Gap.Seconds()
	}
	if h, ok := d.Hist(exposition.VMTTFT); ok {
		s[vocab.SigAdmitRate] = h.Count / d.Gap.Seconds()
	}
	if h, ok := d.Hist(exposition.VMQueueTime); ok {
		s[vocab.SigQueueTimeN] = h.Count
	}
}

// Windows says how many seconds each signal summarises: the gap for two
// scrapes (gauges are the higher of two readings), 0 for one scrape's gauges.
func (d Delta) Windows(s vocab.Signals) map[string]float64 {
	out := make(map[string]float64, len(s))
	for k := range s {
		out[k] = d.Gap.Seconds()
	}
	return out
}

// gaugesOnly is the signals one moment can tell: queue, batch, KV.
func (d Delta) gaugesOnly() vocab.Signals {
	if EngineOf(d.Cur) == vocab.EngineSGLang {
		return d.sglangGauges()
	}
	s := vocab.Signals{}
	for _, g := range exposition.GaugeSignals {
		if v, ok := d.gauge(g.Metric, g.Agg); ok {
			s[g.Signal] = v
		}
	}
	return s
}

// gauge is the higher of the two readings of a gauge: a queue that was deep or
// a KV pool that was full at either moment was so (KV usage drops for a moment
// each time a preemption frees blocks).
func (d Delta) gauge(m exposition.Metric, agg exposition.Aggregation) (float64, bool) {
	v, ok := d.Cur.Value(m, agg, nil)
	if d.Prev != nil {
		if w, okPrev := d.Prev.Value(m, agg, nil); okPrev && (!ok || w > v) {
			return w, true
		}
	}
	return v, ok
}

// promptTokensPerStart is the prompt length of the requests admitted in the
// gap (prompt_tokens_now): prompt tokens prefilled per first token emitted,
// both counted as they happen, where request_prompt_tokens is observed at
// the finish and lags at the onset of longer prompts. It also stands in for
// prompt_tokens_mean when no request finished in the gap.
func (d Delta) promptTokensPerStart() (float64, bool) {
	tokens, ok := d.counterDelta(exposition.VMPromptTokensTotal, nil)
	if !ok {
		return 0, false
	}
	ttft, ok := d.Hist(exposition.VMTTFT)
	if !ok || ttft.Count <= 0 {
		return 0, false
	}
	return tokens / ttft.Count, true
}

// setIf stores f's value under name when name is wanted and f has one.
func setIf(s vocab.Signals, name string, f func() (float64, bool)) {
	if name == "" {
		return
	}
	if v, ok := f(); ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
		s[name] = v
	}
}

// metricFindings summarises the families matching patterns, for the step's
// findings: gauges as their latest value, counters as a rate over the gap (or
// their total with one scrape), histograms as count, mean and p50/p99 over the gap.
func (d Delta) metricFindings(patterns []string) map[string]any {
	out := map[string]any{}
	for _, name := range d.Cur.FamilyNames(patterns) {
		m := exposition.Metric{name}
		switch d.Cur.TypeOf(name) {
		case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
			if v, ok := d.Cur.Value(m, exposition.AggSum, nil); ok {
				out[name] = finite(v)
			}
		case dto.MetricType_COUNTER:
			if v, ok := d.Rate(m, nil); ok {
				out[name] = map[string]any{"rate": finite(v)}
			} else if v, ok := d.Cur.Value(m, exposition.AggSum, nil); ok {
				out[name] = map[string]any{"total": finite(v)}
			}
		case dto.MetricType_HISTOGRAM:
			if h, ok := d.Hist(m); ok {
				out[name] = histogramFinding(h)
			}
		}
	}
	return out
}

// histogramFinding is a histogram's count, mean and quantiles as JSON values.
func histogramFinding(h exposition.Histogram) map[string]any {
	f := map[string]any{"count": h.Count}
	if v, ok := h.Mean(); ok {
		f["mean"] = finite(v)
	}
	if v, ok := h.Quantile(0.5); ok {
		f["p50"] = finite(v)
	}
	if v, ok := h.Quantile(0.99); ok {
		f["p99"] = finite(v)
	}
	return f
}

// finite returns v, or nil for NaN and ±Inf, which JSON cannot carry.
func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
