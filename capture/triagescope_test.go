package capture

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// fleet is a PeerView of self "a" and peers b.., one signal's values per instance.
func fleet(sig string, vals ...float64) *PeerView {
	v := &PeerView{Self: "a", Label: "instance", Selector: `model_name="m"`, Signals: map[string]map[string]float64{sig: {}}}
	for i, x := range vals {
		inst := string(rune('a' + i))
		v.Instances = append(v.Instances, inst)
		v.Signals[sig][inst] = x
	}
	return v
}

// overloaded are the alerting instance's own signals: overload, nothing else.
var overloaded = Signals{SigQueueDepth: 48, SigRunning: 31, SigKVUsage: 0.1, SigQueueWait: 14,
	SigPrefillMean: 0.06, SigTTFTP99: 4.9, SigAbortRatio: 0, SigITLP99: 0.02, SigPromptTokens: 300}

func TestScopeOverDiagnose(t *testing.T) {
	cases := []struct {
		name      string
		sig       Signals
		view      *PeerView
		scope     string
		line      string
		factor    string // contributing factor the scope added ("" none)
		notFactor string
	}{
		{"one of six overloaded", overloaded, fleet(SigQueueDepth, 48, 0, 0, 1, 0, 2),
			ScopeSingle, "only this instance: queue 48 vs peers' median 0 (5 peers)", FactorSingleInstance, FactorFleetWide},
		{"five of six", overloaded, fleet(SigQueueDepth, 48, 30, 40, 12, 0, 20),
			ScopeFleet, "fleet-wide: 5 of 6 instances have queue >= 10", FactorFleetWide, FactorSingleInstance},
		{"half is several, not fleet", overloaded, fleet(SigQueueDepth, 48, 30, 40, 0, 0, 0),
			ScopeSeveral, "3 of 6 instances have queue >= 10", "", FactorSingleInstance},
		{"one peer is not enough", overloaded, fleet(SigQueueDepth, 48, 0),
			"", "scope not measured: fewer than 2 peers with queue_depth", "", FactorSingleInstance},
		{"the alert had no model label", overloaded, &PeerView{Self: "a", Label: "instance"},
			"", "scope not measured: the peers step had no selector", "", FactorSingleInstance},
		{"no peers step", overloaded, nil,
			"", "scope not measured: no view of the model's other instances", "", FactorSingleInstance},
		{"peers lack the defining signal", overloaded, fleet(SigITLP99, 0.02, 0.02, 0.02),
			"", "scope not measured: fewer than 2 peers with queue_depth", "", FactorSingleInstance},
		{"kv-pressure by its pool", Signals{SigKVUsage: 0.99, SigQueueDepth: 2}, fleet(SigKVUsage, 0.99, 0.97, 0.98, 0.5),
			ScopeFleet, "fleet-wide: 3 of 4 instances have KV usage >= 95%", FactorFleetWide, ""},
		{"decode-bound by ITL", Signals{SigITLP99: 0.4, SigRunning: 100, SigQueueDepth: 0}, fleet(SigITLP99, 0.4, 0.03, 0.03, 0.05),
			ScopeSingle, "only this instance: ITL p99 0.4 s vs peers' median 0.03 s (3 peers)", FactorSingleInstance, ""},
		{"unexplained by the slow one, ITL", Signals{SigITLP99: 0.5, SigRunning: 4, SigTTFTP99: 0.3}, fleet(SigITLP99, 0.5, 0.6, 0.7),
			ScopeFleet, "fleet-wide: 3 of 3 instances have ITL p99 >= 0.2 s", FactorFleetWide, ""},
		{"client-aborts", Signals{SigAbortRatio: 0.2, SigTTFTP99: 0.3}, fleet(SigAbortRatio, 0.2, 0, 0.01),
			ScopeSingle, "only this instance: abort ratio 20% vs peers' median 0.5% (2 peers)", FactorSingleInstance, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, _ := diagnose(c.sig, nil, Thresholds{}, false, views{peers: c.view})
			if v.Scope != c.scope {
				t.Errorf("scope %q, want %q (evidence %q)", v.Scope, c.scope, v.Evidence)
			}
			if l := ScopeLine(v); !strings.HasPrefix(l, c.line) {
				t.Errorf("scope line %q, want it to start %q", l, c.line)
			}
			if c.factor != "" && !slices.Contains(v.Contributing, c.factor) {
				t.Errorf("contributing %q, want %s", v.Contributing, c.factor)
			}
			if c.notFactor != "" && slices.Contains(v.Contributing, c.notFactor) {
				t.Errorf("contributing %q, must not hold %s", v.Contributing, c.notFactor)
			}
		})
	}
}

func TestScopeHealthyHasNone(t *testing.T) {
	v, _ := diagnose(Signals{SigQueueDepth: 0, SigTTFTP99: 0.1}, nil, Thresholds{}, false, views{peers: fleet(SigQueueDepth, 0, 30, 40)})
	if v.ID != VerdictHealthy || v.Scope != "" || ScopeLine(v) != "" || len(v.Contributing) != 0 {
		t.Errorf("healthy: scope %q, line %q, contributing %q", v.Scope, ScopeLine(v), v.Contributing)
	}
}

func TestScopeFleetShareThreshold(t *testing.T) {
	view := fleet(SigQueueDepth, 48, 30, 40, 0, 0, 0) // 3 of 6
	v, _ := diagnose(overloaded, nil, Thresholds{FleetShare: 0.4}, false, views{peers: view})
	if v.Scope != ScopeFleet {
		t.Errorf("fleet_share 0.4, 3 of 6: scope %q, want fleet-wide", v.Scope)
	}
}

// imbalanced: this instance takes 3× its peers' median request rate with
// the same prompt and output lengths.
func imbalanced(prompt float64) *PeerView {
	v := fleet(SigQueueDepth, 48, 0, 1, 0)
	v.Signals[SigRequestRate] = map[string]float64{"a": 6.1, "b": 2.0, "c": 2.1, "d": 1.9}
	v.Signals[SigPromptTokens] = map[string]float64{"a": prompt, "b": 340, "c": 330, "d": 345}
	v.Signals[SigOutputTokens] = map[string]float64{"a": 200, "b": 210, "c": 190, "d": 205}
	return v
}

func TestScopeRoutingImbalance(t *testing.T) {
	v, _ := diagnose(overloaded, nil, Thresholds{}, false, views{peers: imbalanced(350)})
	want := "receives 3.0× its peers' median request rate (6.1 vs 2.0 req/s) with the same per-request work (prompt 350 vs 340 tokens, output 200 vs 205 tokens): a load-balancer or session-affinity problem"
	if !slices.Contains(v.Evidence, want) {
		t.Errorf("evidence %q, want %q", v.Evidence, want)
	}
	if !slices.Contains(v.Contributing, FactorRoutingImbalance) || v.Scope != ScopeSingle {
		t.Errorf("contributing %q scope %q, want routing-imbalance and single-instance", v.Contributing, v.Scope)
	}
	// Prompts twice as long: different work, so not the router's doing.
	v, _ = diagnose(overloaded, nil, Thresholds{}, false, views{peers: imbalanced(700)})
	if slices.Contains(v.Contributing, FactorRoutingImbalance) {
		t.Errorf("longer prompts: contributing %q, want no routing-imbalance", v.Contributing)
	}
	// A stricter ratio than 3×.
	v, _ = diagnose(overloaded, nil, Thresholds{ImbalanceRatio: 4}, false, views{peers: imbalanced(350)})
	if slices.Contains(v.Contributing, FactorRoutingImbalance) {
		t.Errorf("imbalance_ratio 4: contributing %q, want no routing-imbalance", v.Contributing)
	}
	// Past its capacity it finishes only what it can (1.6× its peers), but
	// arrivals (admitted + the queue's growth) say what it was sent: 3×.
	p := imbalanced(350)
	p.Signals[SigRequestRate]["a"] = 3.2
	p.Signals[SigArrivalRate] = map[string]float64{"a": 7.4, "b": 2.5, "c": 2.4, "d": 2.6}
	v, _ = diagnose(overloaded, nil, Thresholds{}, false, views{peers: p})
	want = "receives 3.0× its peers' median arrival rate (7.4 vs 2.5 req/s) with the same per-request work (prompt 350 vs 340 tokens, output 200 vs 205 tokens): a load-balancer or session-affinity problem"
	if !slices.Contains(v.Evidence, want) {
		t.Errorf("capped finishes, arrivals 3×: evidence %q, want %q", v.Evidence, want)
	}
	// Over a 15 s window 7.4 vs 2.5 req/s is 111 vs 38 requests: 6 sigma.
	// 1.0 vs 0.5 req/s is 15 vs 8 (the fleet proof saw 0.9 vs 0.4): chance.
	p.Window = 15
	if v, _ = diagnose(overloaded, nil, Thresholds{}, false, views{peers: p}); !slices.Contains(v.Contributing, FactorRoutingImbalance) {
		t.Errorf("111 vs 38 requests in 15 s: contributing %q, want routing-imbalance", v.Contributing)
	}
	p.Signals[SigArrivalRate] = map[string]float64{"a": 1.0, "b": 0.5, "c": 0.45, "d": 0.55}
	if v, _ = diagnose(overloaded, nil, Thresholds{}, false, views{peers: p}); slices.Contains(v.Contributing, FactorRoutingImbalance) {
		t.Errorf("15 vs 8 requests in 15 s: contributing %q, want no routing-imbalance (noise)", v.Contributing)
	}
}

func TestFactorAdviceForEveryScopeFactor(t *testing.T) {
	for _, f := range []string{FactorSingleInstance, FactorFleetWide, FactorRoutingImbalance} {
		if len(FactorAdvice(f)) == 0 {
			t.Errorf("%s: no advice", f)
		}
		if slices.Contains(Verdicts, f) {
			t.Errorf("%s is a verdict id: a factor must not be", f)
		}
	}
	words := map[string]string{FactorSingleInstance: "route", FactorFleetWide: "roll back", FactorRoutingImbalance: "session affinity"}
	for f, w := range words {
		if !strings.Contains(strings.Join(FactorAdvice(f), " "), w) {
			t.Errorf("%s advice %q does not say %q", f, FactorAdvice(f), w)
		}
	}
}

// TestScopeThroughTriageStep reads the PeerView from the prior results as
// the peers step wrote it and as a resumed run decodes it from JSON.
func TestScopeThroughTriageStep(t *testing.T) {
	view := fleet(SigQueueDepth, 48, 0, 0, 1, 0, 2)
	b, err := json.Marshal(map[string]any{FindingPeers: view})
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	for name, findings := range map[string]map[string]any{
		"struct":  {FindingPeers: view},
		"decoded": decoded,
	} {
		t.Run(name, func(t *testing.T) {
			step, err := NewTriage(TriageConfig{})
			if err != nil {
				t.Fatal(err)
			}
			prior := map[string]*Result{"snapshot": {Signals: overloaded}, "peers": {Findings: findings}}
			res, err := step.Run(context.Background(), &Input{Prior: prior})
			if err != nil {
				t.Fatal(err)
			}
			v := res.Verdict
			if v.ID != VerdictOverload || v.Scope != ScopeSingle || !slices.Contains(v.Contributing, FactorSingleInstance) {
				t.Fatalf("verdict %s scope %q contributing %q", v.ID, v.Scope, v.Contributing)
			}
			if l := ScopeLine(v); l != "only this instance: queue 48 vs peers' median 0 (5 peers)" {
				t.Errorf("scope line %q", l)
			}
			if !strings.Contains(res.Summary, "also single-instance") {
				t.Errorf("summary %q does not name single-instance", res.Summary)
			}
		})
	}
}

func TestThresholdsValidateScopeRatios(t *testing.T) {
	for _, th := range []Thresholds{{FleetShare: 1.5}, {ImbalanceWorkTolerance: 2}, {ImbalanceRatio: -1}} {
		if _, err := NewTriage(TriageConfig{Thresholds: th}); err == nil {
			t.Errorf("%+v: accepted", th)
		}
	}
	if _, err := NewTriage(TriageConfig{Thresholds: Thresholds{ImbalanceRatio: 3}}); err != nil {
		t.Errorf("imbalance_ratio 3 (a ratio above 1 by design): %v", err)
	}
}
