package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// What a capture cost the profiled instance's live traffic, read from its
// own /metrics: the stretch before the frame is the run's scrape step's two
// reads of the instance (no live wait: start_profile goes out at once);
// the capture reads the counters at the start, before the stop and after
// the stop's answer. Between two reads the histograms' and the counter's
// deltas give the mean TTFT and inter-token latency, the ITL p99 and the
// tokens that reached clients per second: first tokens (TTFT observations)
// plus the inter-token observations (vLLM observes one per token after the
// first; SGLang's ITL histogram counts tokens, SGLANG.md §4). Not the
// generated-tokens counter: SGLang bumps it only when a request finishes,
// so a stretch of seconds would read no tokens. The frame is held to the
// stretch before; the stop to it, else (no scrape in the run) to the frame.
// Engines' names: vLLM's first, then SGLang's (an exposition has one or
// the other).
var (
	costTTFT = exposition.Metric{"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"}
	costITL  = exposition.Metric{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"}
)

// costPoint is one scrape of the instance's counters. A family the
// exposition lacks counts as empty: SGLang's (a Python registry) show a
// series only once its first request came.
type costPoint struct {
	at        time.Time
	ttft, itl exposition.Histogram
}

// tokens is how many tokens had reached clients: first tokens plus the
// inter-token observations.
func (p costPoint) tokens() float64 { return p.ttft.Count + p.itl.Count }

// CostWindow is what the instance served over one stretch of time.
type CostWindow struct {
	Seconds float64 `json:"seconds"`
	// From says where a stretch the capture did not read itself comes from
	// ("step scrape's reads of the instance").
	From string `json:"from,omitempty"`
	// Requests is how many first tokens came (TTFT observations);
	// TokensPerSecond how many tokens reached clients a second.
	Requests        float64  `json:"requests"`
	TTFTMean        *float64 `json:"ttft_mean_s,omitempty"`
	TTFTP99         *float64 `json:"ttft_p99_s,omitempty"`
	ITLMean         *float64 `json:"itl_mean_s,omitempty"`
	ITLP99          *float64 `json:"itl_p99_s,omitempty"`
	TokensPerSecond *float64 `json:"tokens_per_s,omitempty"`
}

// Cost is a capture's cost to live traffic, in the report and the findings.
type Cost struct {
	Before *CostWindow `json:"before,omitempty"`
	Frame  *CostWindow `json:"frame,omitempty"`
	Stop   *CostWindow `json:"stop,omitempty"`
	// DecodeSlower is the frame's mean ITL over before's, less 1 (0.31: 31%
	// slower); FirstTokenSlower the same for TTFT.
	DecodeSlower     *float64 `json:"decode_slower,omitempty"`
	FirstTokenSlower *float64 `json:"first_token_slower,omitempty"`
	// StallSeconds is the serving the stop took away: its length times the
	// share of before's token rate it lost (the whole stop when nothing was
	// served meanwhile). Without a rate before it, the stop's whole length.
	StallSeconds float64 `json:"stall_s"`
	// Measured says whether StallSeconds comes from the token rates.
	Measured bool   `json:"measured"`
	Summary  string `json:"summary"`
}

// scrapeCost reads the instance's counters now; ok is false when /metrics
// cannot be read.
func (p *Profile) scrapeCost(ctx context.Context, client *http.Client, target string) (costPoint, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.tune.health)
	defer cancel()
	pt := costPoint{at: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	if err != nil {
		return pt, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return pt, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, stepkit.MaxScrapeBytes))
	if err != nil || resp.StatusCode/100 != 2 {
		return pt, false
	}
	e, err := exposition.ParseExposition(body, nil)
	if err != nil {
		return pt, false
	}
	pt.ttft, _ = e.Histogram(costTTFT)
	pt.itl, _ = e.Histogram(costITL)
	return pt, true
}

// between is what was served from a to b.
func between(a, b costPoint) *CostWindow {
	w := &CostWindow{Seconds: b.at.Sub(a.at).Seconds()}
	ttft, itl := b.ttft.Since(a.ttft), b.itl.Since(a.itl)
	w.Requests = ttft.Count
	w.TTFTMean = opt(ttft.Mean())
	w.TTFTP99 = opt(ttft.Quantile(0.99))
	w.ITLMean = opt(itl.Mean())
	w.ITLP99 = opt(itl.Quantile(0.99))
	if w.Seconds > 0 && b.tokens() >= a.tokens() {
		r := (b.tokens() - a.tokens()) / w.Seconds
		w.TokensPerSecond = &r
	}
	return w
}

func opt(v float64, ok bool) *float64 {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// costOf holds the frame and the stop to the stretch before them (the stop
// to the frame when there is no stretch before with a token rate); stopTook
// is the stop's round trip, the stall when no rate says better.
func costOf(before, frame, stop *CostWindow, stopTook time.Duration) *Cost {
	c := &Cost{Before: before, Frame: frame, Stop: stop, StallSeconds: stopTook.Seconds()}
	if before != nil && frame != nil {
		c.DecodeSlower = slower(frame.ITLMean, before.ITLMean)
		c.FirstTokenSlower = slower(frame.TTFTMean, before.TTFTMean)
	}
	ref := before
	if rate := func(w *CostWindow) bool { return w != nil && w.TokensPerSecond != nil && *w.TokensPerSecond > 0 }; !rate(ref) && rate(frame) {
		ref = frame
	}
	if ref != nil && stop != nil && ref.TokensPerSecond != nil && *ref.TokensPerSecond > 0 && stop.TokensPerSecond != nil {
		lost := math.Max(0, 1 - *stop.TokensPerSecond / *ref.TokensPerSecond)
		c.StallSeconds, c.Measured = stop.Seconds*lost, true
	}
	c.Summary = c.summary(frame, stop)
	return c
}

// slower is now ÷ then − 1, when both are known and then is positive.
func slower(now, then *float64) *float64 {
	if now == nil || then == nil || *then <= 0 {
		return nil
	}
	r := *now / *then - 1
	return &r
}

// summary is the cost in one phrase: "cost: first tokens 12% slower,
// decode 31% slower for 5.0 s, stop froze serving 2.1 s". A capture cannot
// speed serving up: a frame that measured faster than the stretch before it
// says no slowdown was measured, with the difference as the noise band
// ("no first-token slowdown measured (±50% noise over 12 requests)").
func (c *Cost) summary(frame, stop *CostWindow) string {
	var parts []string
	if frame != nil {
		if d := c.FirstTokenSlower; d != nil && math.Abs(*d) >= 0.05 {
			if *d > 0 {
				parts = append(parts, fmt.Sprintf("first tokens %.0f%% slower", 100**d))
			} else {
				parts = append(parts, fmt.Sprintf("no first-token slowdown measured (±%.0f%% noise over %.0f requests)",
					-100**d, frame.Requests))
			}
		}
		switch d := c.DecodeSlower; {
		case c.Before == nil:
			parts = append(parts, fmt.Sprintf("%.1f s frame not compared (no scrape of the instance in the run to compare with)", frame.Seconds))
		case d == nil:
			parts = append(parts, fmt.Sprintf("no decode seen in the %.1f s frame", frame.Seconds))
		case math.Abs(*d) < 0.05:
			parts = append(parts, fmt.Sprintf("decode unchanged for %.1f s", frame.Seconds))
		case *d > 0:
			parts = append(parts, fmt.Sprintf("decode %.0f%% slower for %.1f s", 100**d, frame.Seconds))
		default:
			parts = append(parts, fmt.Sprintf("no decode slowdown measured for %.1f s (±%.0f%% noise)", frame.Seconds, -100**d))
		}
	}
	if stop != nil {
		switch {
		case !c.Measured:
			parts = append(parts, fmt.Sprintf("stop took %.1f s (no traffic before it to measure a stall by)", stop.Seconds))
		case c.StallSeconds >= 0.8*stop.Seconds && c.StallSeconds > 0: // most of the stop served nothing
			parts = append(parts, fmt.Sprintf("stop froze serving %.1f s", c.StallSeconds))
		default:
			parts = append(parts, fmt.Sprintf("stop took %.1f s, serving %.1f s lost", stop.Seconds, c.StallSeconds))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "cost: " + strings.Join(parts, ", ")
}

// jsonValue is v as findings hold values: plain JSON (maps, numbers).
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// beforeFromRun is the stretch before the frame as the run already measured
// it: the latest scrape step's two reads of this instance (its findings:
// the histograms' deltas over gap_s). nil when no earlier step read the
// instance twice.
func beforeFromRun(in *vocab.Input, target string) *CostWindow {
	type hist struct {
		Count     float64
		Mean, P99 *float64
	}
	var best *CostWindow
	var bestAt time.Time
	for id, r := range in.Prior {
		if r == nil {
			continue
		}
		var f struct {
			Source  string                     `json:"source"`
			Target  string                     `json:"target"`
			Gap     float64                    `json:"gap_s"`
			At      time.Time                  `json:"signals_at"`
			Metrics map[string]json.RawMessage `json:"metrics"` // a gauge is a number, a histogram an object
		}
		if b, err := json.Marshal(r.Findings); err != nil || json.Unmarshal(b, &f) != nil {
			continue
		}
		if f.Source != vocab.SourceScrape || f.Gap <= 0 || f.Target != httpTarget(target) || (best != nil && !f.At.After(bestAt)) {
			continue
		}
		first := func(names exposition.Metric) (hist, bool) {
			for _, n := range names {
				var h hist
				if raw, ok := f.Metrics[n]; ok && json.Unmarshal(raw, &h) == nil {
					return h, true
				}
			}
			return hist{}, false
		}
		ttft, okT := first(costTTFT)
		itl, okI := first(costITL)
		if !okT && !okI {
			continue
		}
		tps := (ttft.Count + itl.Count) / f.Gap
		best, bestAt = &CostWindow{Seconds: f.Gap, From: "step " + id + "'s reads of the instance", Requests: ttft.Count,
			TTFTMean: ttft.Mean, TTFTP99: ttft.P99, ITLMean: itl.Mean, ITLP99: itl.P99, TokensPerSecond: &tps}, f.At
	}
	return best
}
