package triage

import (
	"fmt"
	"math"
	"strings"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// Where the cause sits (issue: "this server, the whole fleet"), over the
// peers step's PeerView (capture/internal/views). For the verdict's defining signal it
// counts the instances of the model past the same threshold, this one
// included:
//
//	only this one              single-instance   (contributing single-instance)
//	more than fleet_share      fleet-wide        (contributing fleet-wide)
//	in between                 several-instances
//
// Fewer than two peers with data, or no peers step, leave the scope empty
// with a "scope not measured" line: never single-instance by default.
// Independently, an instance taking imbalance_ratio × its peers' median
// request rate with the same per-request work (prompt and output lengths
// within imbalance_work_tolerance of the peers') is a routing imbalance.

// scopeSignal is a signal that defines a verdict, with how to judge and print it.
type scopeSignal struct {
	sig  string
	name string
	past func(r reading, x float64) bool
	thr  func(r reading) float64
	fmt  func(float64) string
}

var (
	scopeQueue   = scopeSignal{vocab.SigQueueDepth, "queue", func(r reading, x float64) bool { return x >= r.th.QueueDepth }, func(r reading) float64 { return r.th.QueueDepth }, views.FmtNum}
	scopeKV      = scopeSignal{vocab.SigKVUsage, "KV usage", func(r reading, x float64) bool { return x >= r.th.KVUsage }, func(r reading) float64 { return r.th.KVUsage }, fmtPct}
	scopePreempt = scopeSignal{vocab.SigPreemptionsRate, "preemptions/s", func(r reading, x float64) bool { return x > r.th.PreemptionsPerS }, func(r reading) float64 { return r.th.PreemptionsPerS }, views.FmtNum}
	scopeTTFT    = scopeSignal{vocab.SigTTFTP99, "TTFT p99", func(r reading, x float64) bool { return x >= r.th.TTFTP99 }, func(r reading) float64 { return r.th.TTFTP99 }, fmtSec}
	scopeITL     = scopeSignal{vocab.SigITLP99, "ITL p99", func(r reading, x float64) bool { return x >= r.th.ITLP99 }, func(r reading) float64 { return r.th.ITLP99 }, fmtSec}
	scopePrompt  = scopeSignal{vocab.SigPromptTokens, "prompt length", func(r reading, x float64) bool { return x >= r.th.PromptTokensMean }, func(r reading) float64 { return r.th.PromptTokensMean }, views.FmtNum}
	scopeAborts  = scopeSignal{vocab.SigAbortRatio, "abort ratio", func(r reading, x float64) bool { return x >= r.th.AbortRatio }, func(r reading) float64 { return r.th.AbortRatio }, fmtPct}
)

// scopeSignals are the signals that define each verdict, the most telling first.
func (r reading) scopeSignals(id string) []scopeSignal {
	switch id {
	case vocab.VerdictKVPressure:
		if r.kvFull() || !r.preempting() {
			return []scopeSignal{scopeKV, scopePreempt}
		}
		return []scopeSignal{scopePreempt, scopeKV}
	case vocab.VerdictOverload:
		return []scopeSignal{scopeQueue}
	case vocab.VerdictPrefillBound:
		return []scopeSignal{scopeTTFT, scopePrompt}
	case vocab.VerdictDecodeBound:
		return []scopeSignal{scopeITL}
	case vocab.VerdictUnexplained, vocab.VerdictGPUDegraded:
		if r.itlHigh() && !r.ttftHigh() {
			return []scopeSignal{scopeITL, scopeTTFT}
		}
		return []scopeSignal{scopeTTFT, scopeITL}
	case vocab.VerdictClientAborts:
		return []scopeSignal{scopeAborts}
	}
	return nil
}

// scope returns the verdict's Scope ("" when the peers were not measured)
// and its evidence lines; it may append contributing factors to v
// (single-instance, fleet-wide, routing-imbalance). held are the rules that held.
func (r reading) scope(v *vocab.Verdict, _ map[string]bool) (string, []string) {
	sigs := r.scopeSignals(v.ID)
	if len(sigs) == 0 {
		return "", nil
	}
	p := r.vw.peers
	if p == nil {
		return "", []string{"scope not measured: no view of the model's other instances (no peers step, or it has not answered yet)"}
	}
	if p.Selector == "" || p.Self == "" {
		return "", []string{"scope not measured: the peers step had no selector or no instance to look for (does the alert carry the model and instance labels?)"}
	}
	var lines []string
	if l := r.imbalance(p); l != "" {
		v.Contributing = append(v.Contributing, vocab.FactorRoutingImbalance)
		lines = append(lines, l)
	}
	s, ok := pickScopeSignal(p, sigs)
	if !ok {
		why := fmt.Sprintf("scope not measured: fewer than 2 peers with %s under {%s}", sigs[0].sig, p.Selector)
		if f := p.Failed[sigs[0].sig]; f != "" {
			why += " (its query failed: " + f + ")"
		}
		return "", append([]string{why}, lines...)
	}
	scope, line := r.judgeScope(p, s)
	switch scope {
	case vocab.ScopeSingle:
		v.Contributing = append(v.Contributing, vocab.FactorSingleInstance)
	case vocab.ScopeFleet:
		v.Contributing = append(v.Contributing, vocab.FactorFleetWide)
	}
	return scope, append([]string{line}, lines...)
}

// pickScopeSignal is the first of sigs with at least 2 peers' data.
func pickScopeSignal(p *views.PeerView, sigs []scopeSignal) (scopeSignal, bool) {
	for _, s := range sigs {
		if _, n := p.PeerMedian(s.sig); n >= 2 {
			return s, true
		}
	}
	return scopeSignal{}, false
}

// judgeScope counts the instances past s's threshold, this one included (its
// verdict held), and says where the cause sits.
func (r reading) judgeScope(p *views.PeerView, s scopeSignal) (string, string) {
	peers := p.PeerValues(s.sig)
	past := 1
	for _, x := range peers {
		if s.past(r, x) {
			past++
		}
	}
	total := len(peers) + 1
	switch {
	case past == 1:
		med, _ := p.PeerMedian(s.sig)
		self := "no reading in the peers' query"
		if x, ok := p.Signals[s.sig][p.Self]; ok {
			self = s.fmt(x)
		} else if x, ok := r.get(s.sig); ok {
			self = s.fmt(x)
		}
		return vocab.ScopeSingle, fmt.Sprintf("only this instance: %s %s vs peers' median %s (%d peers)", s.name, self, s.fmt(med), len(peers))
	case float64(past) > r.th.FleetShare*float64(total):
		return vocab.ScopeFleet, fmt.Sprintf("fleet-wide: %d of %d instances have %s >= %s", past, total, s.name, s.fmt(s.thr(r)))
	}
	return vocab.ScopeSeveral, fmt.Sprintf("%d of %d instances have %s >= %s", past, total, s.name, s.fmt(s.thr(r)))
}

// imbalance names a routing imbalance: this instance's arrival rate (else
// its request rate, when no arrivals were read) at least imbalance_ratio ×
// its peers' median while its per-request work (mean prompt and output
// lengths, whichever were measured) sits within imbalance_work_tolerance of
// theirs. Arrivals first: an instance sent 3× its share past its capacity
// finishes only what it can (vllmsim: 4.1 req/s of 7.5 sent), which would
// read 1.6×.
func (r reading) imbalance(p *views.PeerView) string {
	sig, what := vocab.SigArrivalRate, "arrival rate"
	if _, n := p.PeerMedian(sig); n < 2 {
		sig, what = vocab.SigRequestRate, "request rate"
	}
	self, ok := p.Signals[sig][p.Self]
	med, n := p.PeerMedian(sig)
	if !ok || n < 2 || med <= 0 || self < r.th.ImbalanceRatio*med {
		return ""
	}
	// Read as counts over the window, the excess must stand out of
	// arrival noise: at least 10 requests and 3 standard deviations of the
	// difference of two Poisson counts (sqrt(n_self + n_median)). Over a
	// short window at a low rate (0.5 req/s, 15 s: ~7 requests) twice the
	// median happens by chance (the fleet proof saw 0.9 vs 0.4 req/s).
	if w := p.Window; w > 0 {
		nSelf, nMed := self*w, med*w
		if d := nSelf - nMed; d < 10 || d < 3*math.Sqrt(nSelf+nMed) {
			return ""
		}
	}
	var work []string
	for _, w := range []struct{ sig, name string }{{vocab.SigPromptTokens, "prompt"}, {vocab.SigOutputTokens, "output"}} {
		x, okX := p.Signals[w.sig][p.Self]
		m, k := p.PeerMedian(w.sig)
		if !okX || k < 2 {
			continue
		}
		if m <= 0 || x < m*(1-r.th.ImbalanceWorkTolerance) || x > m*(1+r.th.ImbalanceWorkTolerance) {
			return "" // different work: its clients differ, not its routing
		}
		work = append(work, fmt.Sprintf("%s %.0f vs %.0f tokens", w.name, x, m))
	}
	if len(work) == 0 {
		return ""
	}
	return fmt.Sprintf("receives %.1f× its peers' median %s (%.1f vs %.1f req/s) with the same per-request work (%s): a load-balancer or session-affinity problem",
		self/med, what, self, med, strings.Join(work, ", "))
}
