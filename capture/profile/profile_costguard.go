package profile

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
)

// CostBounds are what a playbook lets a capture cost live traffic.
type CostBounds struct {
	MaxITL       time.Duration `yaml:"max_itl" json:"max_itl,omitempty" jsonschema_description:"Skip the capture when the instance's inter-token latency p99 before the frame is already above this (the run's tier-1 itl_p99 when a step measured it, else the run's scrape step's two reads of the instance). 0: no ceiling."`
	MaxTTFT      time.Duration `yaml:"max_ttft" json:"max_ttft,omitempty" jsonschema_description:"Skip the capture when the instance's time-to-first-token p99 before the frame is already above this (as max_itl). 0: no ceiling."`
	MaxLastStall time.Duration `yaml:"max_last_stall" json:"max_last_stall,omitempty" jsonschema_description:"Skip the capture when the last capture of this target (by any replica) stalled serving longer than this: SGLang's stop freezes the scheduler while it exports, vLLM's blocks while it flushes. 0: no bound."`
}

// StallMemory remembers, across replicas, how long each target's last
// capture stalled serving. Env.Profiles implements it when it can (the
// runner's plane does); without it max_last_stall is not checked and
// nothing is remembered.
type StallMemory interface {
	RecordStall(ctx context.Context, req vocab.LeaseRequest, stall time.Duration) error
	LastStall(ctx context.Context, target string) (stall time.Duration, at time.Time, ok bool, err error)
}

// costRun is one fresh capture's scrapes of the instance's counters.
type costRun struct {
	start, preStop costPoint
	// before is the stretch the frame is held to: the run's own earlier
	// reads of the instance (beforeFromRun); nil when the run has none.
	before    *CostWindow
	ok        bool // the scrape at the start worked
	preStopOK bool
}

// costScrapeAtStart bounds the read of the counters that opens the frame's
// stretch: it runs right before start_profile, so it may delay the start
// this long at most.
const costScrapeAtStart = 500 * time.Millisecond

// startCost reads the counters once, right before the start: no live wait,
// the stretch before the frame is what the run already measured. nil when
// /metrics cannot be read in time.
func (p *Profile) startCost(ctx context.Context, fr *frameRun, before *CostWindow) *costRun {
	ctx, cancel := context.WithTimeout(ctx, costScrapeAtStart)
	defer cancel()
	pt, ok := p.scrapeCost(ctx, fr.client, fr.target)
	if !ok {
		return nil
	}
	return &costRun{start: pt, ok: true, before: before}
}

// lastStallRefusal says why the target's last stall forbids this capture, or "".
func (p *Profile) lastStallRefusal(ctx context.Context, in *vocab.Input, target string) string {
	mem, ok := in.Env.Profiles.(StallMemory)
	if p.cfg.Cost.MaxLastStall <= 0 || !ok {
		return ""
	}
	stall, at, ok, err := mem.LastStall(ctx, target)
	if err != nil {
		stepkit.Logger(in).Warn("The target's last stall could not be read; capturing anyway.", zap.Error(err))
		return ""
	}
	if !ok || stall <= p.cfg.Cost.MaxLastStall {
		return ""
	}
	return fmt.Sprintf("the last capture of %s (started %s) stalled serving %s, over cost.max_last_stall %s",
		httpTarget(target), at.UTC().Format(time.RFC3339), stall.Round(time.Millisecond), p.cfg.Cost.MaxLastStall)
}

// ceilingRefusal says which latency before the frame is past its ceiling,
// or "": the run's own tier-1 p99 (the snapshot's PromQL over the alert's
// window) when an earlier step measured it, else the scrape step's stretch.
func (p *Profile) ceilingRefusal(in *vocab.Input, before *CostWindow) string {
	for _, c := range []struct {
		name, sig string
		max       time.Duration
		measured  func(*CostWindow) *float64
	}{
		{"inter-token latency", vocab.SigITLP99, p.cfg.Cost.MaxITL, func(w *CostWindow) *float64 { return w.ITLP99 }},
		{"time to first token", vocab.SigTTFTP99, p.cfg.Cost.MaxTTFT, func(w *CostWindow) *float64 { return w.TTFTP99 }},
	} {
		if c.max <= 0 {
			continue
		}
		v, from := priorSignal(in, c.sig)
		if from == "" && before != nil {
			if m := c.measured(before); m != nil {
				v, from = *m, fmt.Sprintf("%s over %.1f s before the frame", before.From, before.Seconds)
			}
		}
		if from != "" && v > c.max.Seconds() {
			return fmt.Sprintf("%s p99 is already %s (%s), over the ceiling %s", c.name,
				time.Duration(v*float64(time.Second)).Round(time.Millisecond), from, c.max)
		}
	}
	return ""
}

// priorSignal is the highest value of sig an earlier step of the run
// measured, and which step ("" when none did).
func priorSignal(in *vocab.Input, sig string) (float64, string) {
	ids := make([]string, 0, len(in.Prior))
	for id := range in.Prior {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	best, from := 0.0, ""
	for _, id := range ids {
		if r := in.Prior[id]; r != nil {
			if v, ok := r.Signals[sig]; ok && (from == "" || v > best) {
				best, from = v, "step "+id+"'s "+sig
			}
		}
	}
	return best, from
}

// costSkip ends a capture its cost bounds forbid: the lease (start never
// sent) is released and the step skipped, saying why.
func (p *Profile) costSkip(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, why string) (*vocab.Result, error) {
	p.release(ctx, in, fr)
	res.Findings["cost_skipped"] = why
	res.Summary = fmt.Sprintf("profile %s skipped: %s", httpTarget(fr.target), why)
	return res, vocab.Skipf("cost: %s", why)
}

// costScrapeBeforeStop bounds the scrape that ends the frame's stretch: it
// runs between the lease's Stopping and stop_profile, so it may delay the
// stop this long at most.
const costScrapeBeforeStop = time.Second

// scrapeBeforeStop reads the counters at the frame's end, right before the
// stop is sent (the lease already says stopping).
func (p *Profile) scrapeBeforeStop(ctx context.Context, fr *frameRun) {
	if fr.cost == nil || !fr.cost.ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, costScrapeBeforeStop)
	defer cancel()
	fr.cost.preStop, fr.cost.preStopOK = p.scrapeCost(ctx, fr.client, fr.target)
}

// measureStop closes the cost once the stop answered: the stretch from the
// frame's end to the answer, against the one before; the stall is
// remembered for the next capture's max_last_stall.
func (p *Profile) measureStop(ctx context.Context, in *vocab.Input, fr *frameRun) {
	cr := fr.cost
	if cr == nil || !cr.ok {
		return
	}
	var frame, stop *CostWindow
	if cr.preStopOK {
		frame = between(cr.start, cr.preStop)
		if after, ok := p.scrapeCost(ctx, fr.client, fr.target); ok {
			stop = between(cr.preStop, after)
		}
	}
	fr.costResult = costOf(cr.before, frame, stop, fr.stopTook)
	mem, ok := in.Env.Profiles.(StallMemory)
	if !ok {
		return
	}
	req := vocab.LeaseRequest{Target: fr.target, RunID: in.RunID, Plan: in.Plan, StepID: in.StepID}
	stall := time.Duration(fr.costResult.StallSeconds * float64(time.Second))
	if err := p.leaseWrite(context.WithoutCancel(ctx), func(c context.Context) error { return mem.RecordStall(c, req, stall) }); err != nil {
		stepkit.Logger(in).Warn("The capture's stall could not be remembered for the next one.", zap.Error(err))
	}
}
