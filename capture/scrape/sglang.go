package scrape

import (
	"strings"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/internal/sglangexpo"
	"github.com/autocapture/autocapture/vocab"
)

// SGLang's dialect (capture/README.md, Engine dialects): its families mapped
// onto the canonical signals as SGLANG.md §4 (team notes) lays out, so triage
// judges an SGLang server by the same rules as a vLLM one.

// EngineOf says which engine's dialect an exposition speaks (exposition's
// Exposition.Engine: by its families' prefix).
func EngineOf(e exposition.Exposition) string { return e.Engine() }

// totalPriority keeps the all-priorities series of a 2026 scheduler gauge
// (priority="" is the total with --enable-priority-scheduling, §2); older
// builds have no priority label, which reads as "".
func totalPriority(ls map[string]string) bool { return ls["priority"] == "" }

// streamed keeps TTFT series of streamed requests where the is_streaming
// label exists (2026): a non-streamed request's first token is flushed at 50
// tokens or its finish, so its TTFT is about its e2e (§4).
func streamed(ls map[string]string) bool {
	v, ok := ls["is_streaming"]
	return !ok || v == "true"
}

// prefillStage keeps the prefill forward stage of per_stage_req_latency_seconds.
func prefillStage(ls map[string]string) bool { return ls["stage"] == sglangexpo.StagePrefill }

// sglangCount is a scheduler count (queue, batch) of one instance: the same
// batch is reported by every TP rank of a DP rank when
// --enable-metrics-for-all-schedulers is on, so the max within a DP rank,
// summed over the DP ranks (§1).
func sglangCount(e exposition.Exposition, m sglangexpo.Metric) (float64, bool) {
	perDP := map[string]float64{}
	for _, s := range e.Series(m, totalPriority) {
		dp := s.Labels["dp_rank"]
		if v, seen := perDP[dp]; !seen || s.Value > v {
			perDP[dp] = s.Value
		}
	}
	if len(perDP) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, v := range perDP {
		sum += v
	}
	return sum, true
}

// sglangGauges is what one moment tells: queue and batch summed over DP
// ranks, KV usage the fullest rank's (§1), each the higher of the two readings.
func (d Delta) sglangGauges() vocab.Signals {
	s := vocab.Signals{}
	higher := func(name string, read func(exposition.Exposition) (float64, bool)) {
		v, ok := read(d.Cur)
		if d.Prev != nil {
			if w, okPrev := read(*d.Prev); okPrev && (!ok || w > v) {
				v, ok = w, true
			}
		}
		if ok {
			s[name] = v
		}
	}
	higher(vocab.SigQueueDepth, func(e exposition.Exposition) (float64, bool) { return sglangCount(e, sglangexpo.Queue) })
	higher(vocab.SigRunning, func(e exposition.Exposition) (float64, bool) { return sglangCount(e, sglangexpo.Running) })
	higher(vocab.SigKVUsage, func(e exposition.Exposition) (float64, bool) {
		return e.Value(sglangexpo.TokenUsage, exposition.AggMax, totalPriority)
	})
	return s
}

// sglangFinished is how many requests finished in the gap (over the life of
// the process with one scrape): num_requests_total, aborted ones included,
// where it exists, else the e2e histogram's count.
func (d Delta) sglangFinished() (float64, bool) {
	if n, ok := d.counterDelta(sglangexpo.Requests, nil); ok {
		return n, true
	}
	h, ok := d.HistWhere(sglangexpo.E2E, nil)
	return h.Count, ok
}

// sglangSignals computes the canonical signals from SGLang's families.
func (d Delta) sglangSignals() vocab.Signals {
	s := d.sglangGauges()
	hists := []struct {
		m              sglangexpo.Metric
		keep           func(map[string]string) bool
		p99, p50, mean string
	}{
		{sglangexpo.TTFT, streamed, vocab.SigTTFTP99, vocab.SigTTFTP50, ""},
		{sglangexpo.ITL, nil, vocab.SigITLP99, vocab.SigITLP50, ""},
		{sglangexpo.QueueTime, nil, "", "", vocab.SigQueueTimeMean},
		{sglangexpo.StageLatency, prefillStage, "", "", vocab.SigPrefillMean},
		{sglangexpo.E2E, streamed, "", "", vocab.SigE2EMean}, // the same requests as the TTFT
		{sglangexpo.PromptHist, nil, "", "", vocab.SigPromptTokens},
		{sglangexpo.GenerationHist, nil, "", "", vocab.SigOutputTokens},
	}
	for _, hs := range hists {
		h, ok := d.HistWhere(hs.m, hs.keep)
		if !ok || h.Count <= 0 {
			continue
		}
		setIf(s, hs.mean, h.Mean)
		if h.Count >= minObservationsP99 {
			setIf(s, hs.p99, func() (float64, bool) { return h.Quantile(0.99) })
		}
		setIf(s, hs.p50, func() (float64, bool) { return h.Quantile(0.5) })
	}
	finished, okFin := d.sglangFinished()
	perFinished := func(m sglangexpo.Metric) func() (float64, bool) {
		return func() (float64, bool) {
			n, ok := d.counterDelta(m, nil)
			if !ok || !okFin || finished <= 0 {
				return 0, false
			}
			return n / finished, true
		}
	}
	// Token counters count at the finish (§4): per finished request.
	if _, ok := s[vocab.SigPromptTokens]; !ok {
		setIf(s, vocab.SigPromptTokens, perFinished(sglangexpo.PromptTokens))
	}
	if _, ok := s[vocab.SigOutputTokens]; !ok {
		setIf(s, vocab.SigOutputTokens, perFinished(sglangexpo.GenerationTokens))
	}
	setIf(s, vocab.SigPromptTokensNow, d.sglangPromptTokensNow)
	if v, ok := d.Rate(sglangexpo.Retracted, nil); ok {
		s[vocab.SigPreemptionsRate] = v
	}
	setIf(s, vocab.SigAbortRatio, d.sglangAbortRatio)
	if okFin && d.Prev != nil && d.Gap > 0 {
		s[vocab.SigRequestRate] = finished / d.Gap.Seconds()
	}
	setIf(s, vocab.SigPrefixHitRatio, d.sglangPrefixHits)
	d.sglangQueueNow(s)
	return s
}

// sglangQueueNow is queueNow in SGLang's dialect: the queue's growth, the
// first tokens per second (every one, streamed or not) and the requests the
// queue-time histogram covers. Only with two scrapes.
func (d Delta) sglangQueueNow(s vocab.Signals) {
	if d.Prev == nil || d.Gap <= 0 {
		return
	}
	now, okNow := sglangCount(d.Cur, sglangexpo.Queue)
	before, okBefore := sglangCount(*d.Prev, sglangexpo.Queue)
	if okNow && okBefore {
		s[vocab.SigQueueGrowth] = (now - before) / d.Gap.Seconds()
	}
	if h, ok := d.HistWhere(sglangexpo.TTFT, nil); ok {
		s[vocab.SigAdmitRate] = h.Count / d.Gap.Seconds()
	}
	if h, ok := d.HistWhere(sglangexpo.QueueTime, nil); ok {
		s[vocab.SigQueueTimeN] = h.Count
	}
}

// sglangPromptTokensNow is prompt tokens prefilled (computed and cached,
// counted per forward pass) per first token in the gap (late 2025+).
func (d Delta) sglangPromptTokensNow() (float64, bool) {
	isPrefill := func(ls map[string]string) bool { return strings.HasPrefix(ls["mode"], "prefill_") }
	tokens, ok := d.counterDelta(sglangexpo.RealtimeTokens, isPrefill)
	if !ok {
		return 0, false
	}
	ttft, ok := d.HistWhere(sglangexpo.TTFT, nil)
	if !ok || ttft.Count <= 0 {
		return 0, false
	}
	return tokens / ttft.Count, true
}

// sglangAbortRatio is aborted ÷ finished; both count aborted requests (§4).
// A build that has the abort counter writes its series at the first abort
// (§1), so from late 2025 an absent counter beside finished requests is 0.
func (d Delta) sglangAbortRatio() (float64, bool) {
	all, ok := d.counterDelta(sglangexpo.Requests, nil)
	if !ok || all <= 0 {
		return 0, false
	}
	aborted, ok := d.counterDelta(sglangexpo.Aborted, nil)
	if !ok {
		if sglangexpo.Before(sglangexpo.EraOf(d.Cur.Fams), sglangexpo.EraLate2025) {
			return 0, false
		}
		aborted = 0
	}
	return aborted / all, true
}

// sglangPrefixHits is the prefix-cache hit ratio over the gap: cached over
// all prefill tokens per forward pass (realtime_tokens_total), else cached
// over prompt tokens at the finish. Never the cache_hit_rate gauge, which is
// the last prefill batch's (§4).
func (d Delta) sglangPrefixHits() (float64, bool) {
	mode := func(m string) func(map[string]string) bool {
		return func(ls map[string]string) bool { return ls["mode"] == m }
	}
	hit, okH := d.counterDelta(sglangexpo.RealtimeTokens, mode("prefill_cache"))
	miss, okM := d.counterDelta(sglangexpo.RealtimeTokens, mode("prefill_compute"))
	if okH && okM && hit+miss > 0 {
		return hit / (hit + miss), true
	}
	total := func(ls map[string]string) bool { return ls["cache_source"] == "" || ls["cache_source"] == "total" }
	cached, okC := d.counterDelta(sglangexpo.CachedTokens, total)
	prompt, okP := d.counterDelta(sglangexpo.PromptTokens, nil)
	if okC && okP && prompt > 0 {
		return cached / prompt, true
	}
	return 0, false
}

// sglangFindings records what SGLang's era cannot tell (not_exposed, judged
// on the lifetime figures with one scrape), what it tells beyond the signals
// (engine_extras) and how its figures differ from vLLM's (engine_notes).
func (d Delta) sglangFindings(res *vocab.Result, era string) {
	all := res.Signals
	if life, ok := res.Findings["lifetime_signals"].(vocab.Signals); ok {
		all = life
	}
	if gaps := sglangNotExposed(era, d.Cur, all); len(gaps) > 0 {
		res.Findings[vocab.FindingNotExposed] = gaps
	}
	if x := d.sglangExtras(era); len(x) > 0 {
		res.Findings[vocab.FindingEngineExtras] = x
	}
	res.Findings[vocab.FindingEngineNotes] = sglangexpo.Notes(era)
}

// sglangNotExposed maps each canonical signal the scrape has no value for,
// and SGLang's era has no series for, to why (vocab.FindingNotExposed).
func sglangNotExposed(era string, e exposition.Exposition, s vocab.Signals) map[string]string {
	out := map[string]string{}
	for _, sig := range sglangexpo.Gaps {
		if _, ok := s[sig]; ok {
			continue
		}
		if why := sglangexpo.NotExposed(era, sig); why != "" {
			out[sig] = why
			continue
		}
		absent := map[string]bool{
			vocab.SigAbortRatio:     !e.Has(sglangexpo.Aborted),
			vocab.SigPrefixHitRatio: !e.Has(sglangexpo.RealtimeTokens) && !e.Has(sglangexpo.CachedTokens),
		}
		if why := sglangexpo.NotExposedByBuild(era, sig); why != "" && absent[sig] {
			out[sig] = why
		}
	}
	return out
}

// sglangExtras are SGLang's figures beyond the canonical signals, for the
// evidence (vocab.FindingEngineExtras): gauges as read now, counters as rates.
func (d Delta) sglangExtras(era string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range sglangexpo.Extras {
		switch {
		case x.Counter:
			if v, ok := d.Rate(x.Metric, nil); ok {
				out[x.Key] = v
			}
		default:
			agg := exposition.AggSum
			if x.Max {
				agg = exposition.AggMax
			}
			if v, ok := d.Cur.Value(x.Metric, agg, totalPriority); ok {
				if x.Key == "cache_hit_rate_last_batch" && era == sglangexpo.EraV035 {
					v /= 100 // a percent in v0.3.5 (§2)
				}
				out[x.Key] = v
			}
		}
	}
	// The other request stages (PD bootstrap, KV transfer, decode waiting…):
	// mean seconds per request over the gap (§3).
	for _, stage := range d.Cur.LabelValues(sglangexpo.StageLatency, "stage") {
		if stage == sglangexpo.StagePrefill {
			continue // prefill_time_mean
		}
		h, ok := d.HistWhere(sglangexpo.StageLatency, func(ls map[string]string) bool { return ls["stage"] == stage })
		if m, okM := h.Mean(); ok && okM {
			out["stage_"+stage+"_mean_s"] = m
		}
	}
	return out
}
