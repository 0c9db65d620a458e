package vocab

import (
	"regexp"
	"slices"
	"strings"
)

// Verdict is triage's answer: one primary cause from the fixed list, the factors that
// also hold, the evidence lines that led there, and what to do.
type Verdict struct {
	ID           string   `json:"id"`
	Contributing []string `json:"contributing,omitempty"`
	Evidence     []string `json:"evidence,omitempty"`
	Advice       []string `json:"advice,omitempty"`
	// Untrusted names the signals triage set aside, and why (also the last
	// evidence line, so a thread shows it).
	Untrusted []string `json:"untrusted,omitempty"`
	// Preliminary: reached over part of tier 1 (the PromQL snapshot, before
	// the scrape's second sample); the triage step's record refines it.
	Preliminary bool `json:"preliminary,omitempty"`
	// Basis says, per signal judged about the instance's workload (prompt
	// length, prefill time), whether its own past decided (baseline-before,
	// baseline-1d) or the absolute threshold (absolute: no baseline).
	Basis map[string]string `json:"basis,omitempty"`
	// Scope is where the cause sits: ScopeSingle, ScopeSeveral or ScopeFleet
	// (below); empty when the instance's peers were not measured.
	Scope string `json:"scope,omitempty"`
	// Profile is what a framed profile found, once one refined the verdict
	// (WithProfile): the metrics' cause stays the id, the profile explains it.
	Profile *ProfileFinding `json:"profile,omitempty"`
}

// Verdict ids, the fixed list used everywhere.
const (
	VerdictHealthy      = "healthy"
	VerdictOverload     = "overload"
	VerdictKVPressure   = "kv-pressure"
	VerdictPrefillBound = "prefill-bound"
	VerdictDecodeBound  = "decode-bound"
	VerdictClientAborts = "client-aborts"
	VerdictUnexplained  = "unexplained"
	VerdictGPUDegraded  = "gpu-degraded"
	// VerdictNoEvidence: nothing measured the instance (every tier-1 step
	// failed or was not configured), so nothing is explained or ruled out.
	// Unlike unexplained, it does not call for traces and a profile: the
	// first thing to fix is what kept the metrics from being read.
	VerdictNoEvidence = "no-evidence"
)

// Verdicts lists every verdict id.
var Verdicts = []string{VerdictHealthy, VerdictOverload, VerdictKVPressure, VerdictPrefillBound,
	VerdictDecodeBound, VerdictClientAborts, VerdictUnexplained, VerdictGPUDegraded, VerdictNoEvidence}

// Basis values: how a signal was judged.
const (
	BasisBefore   = "baseline-before" // against the window before the alert
	BasisDay      = "baseline-1d"     // against the same window a day earlier
	BasisAbsolute = "absolute"        // against the threshold: no baseline
)

// Scopes: where the verdict's cause sits. The verdict id stays the cause.
const (
	// ScopeSingle: the instance is an outlier while its peers are fine (a
	// node, a GPU, or a routing imbalance: drain or route away, check the node).
	ScopeSingle = "single-instance"
	// ScopeSeveral: more than this instance but not most of the fleet.
	ScopeSeveral = "several-instances"
	// ScopeFleet: most instances of the model show it (traffic or a release:
	// scale out, roll back).
	ScopeFleet = "fleet-wide"
)

// Contributing factors the scope adds; they are not verdicts.
const (
	FactorSingleInstance   = ScopeSingle
	FactorFleetWide        = ScopeFleet
	FactorRoutingImbalance = "routing-imbalance"
)

// factorAdvice is the advice for the contributing factors that are not
// verdicts, in the seed's terms; FactorAdvice reads it.
var factorAdvice = map[string][]string{
	FactorSingleInstance: {
		"only this instance: drain it or route traffic away from it while you look",
		"check its node and GPU (throttling, XID or ECC errors, a noisy neighbour)",
		"compare its request rate with its peers': a routing imbalance sends it more than its share",
	},
	FactorFleetWide: {
		"every instance of the model shows it: a traffic or release problem, not one node",
		"scale out the model's instances; check traffic growth and which clients grew",
		"check recent releases (model, vLLM, config) and roll back if one lines up with the onset",
	},
	FactorRoutingImbalance: {
		"the load balancer sends this instance more than its share: check its weights and health checks",
		"check session affinity (sticky sessions, prefix-aware routing) pinning heavy clients to this instance",
		"spread the traffic (least-requests routing) before adding instances: the fleet has room",
	},
}

// FactorAdvice is the advice for a contributing factor that is not a
// verdict (single-instance, fleet-wide, routing-imbalance); nil otherwise.
func FactorAdvice(id string) []string { return factorAdvice[id] }

// scopeLineRE recognises a scope's evidence line (ScopeLine).
var scopeLineRE = regexp.MustCompile(`^(only this instance: |fleet-wide: |\d+ of \d+ instances have |scope not measured: )`)

// ScopeLine is the verdict's evidence line that says where the cause sits
// ("only this instance: …", "fleet-wide: …", "3 of 6 instances have …", or
// "scope not measured: …"); "" when there is none.
func ScopeLine(v *Verdict) string {
	if v == nil {
		return ""
	}
	for _, l := range v.Evidence {
		if scopeLineRE.MatchString(l) {
			return l
		}
	}
	return ""
}

// EvidenceBesideScope is the verdict's evidence less the line ScopeText
// already says, for a surface that prints ScopeText above the evidence: the
// scope is said once, not again as a bullet under it.
func EvidenceBesideScope(v *Verdict) []string {
	if v == nil {
		return nil
	}
	line := ScopeLine(v)
	if line == "" || ScopeText(v) == "" {
		return v.Evidence
	}
	out := make([]string, 0, len(v.Evidence))
	for _, e := range v.Evidence {
		if e != line {
			out = append(out, e)
		}
	}
	return out
}

// ScopeText is where the verdict's cause sits, for a thread, a console or
// the run page: "scope: single-instance — only this instance: queue 48 vs
// peers' median 0 (5 peers)", "scope: not measured — …" when the peers were
// not measured, "" when triage said nothing about it (healthy, an older verdict).
func ScopeText(v *Verdict) string {
	if v == nil {
		return ""
	}
	line := ScopeLine(v)
	if v.Scope == "" {
		if rest, ok := strings.CutPrefix(line, "scope not measured: "); ok {
			return "scope: not measured — " + rest
		}
		return ""
	}
	if line == "" {
		return "scope: " + v.Scope
	}
	return "scope: " + v.Scope + " — " + line
}

// AllAdvice is the verdict's advice, then that of its contributing factors
// that are not verdicts (single-instance, fleet-wide, routing-imbalance),
// each line once.
func AllAdvice(v *Verdict) []string {
	if v == nil {
		return nil
	}
	out := slices.Clone(v.Advice)
	for _, c := range v.Contributing {
		for _, a := range factorAdvice[c] {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}
