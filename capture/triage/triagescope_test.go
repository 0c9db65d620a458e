package triage

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// fleet is a PeerView of self "a" and peers b.., one signal's values per instance.
func fleet(sig string, vals ...float64) *views.PeerView {
	v := &views.PeerView{Self: "a", Label: "instance", Selector: `model_name="m"`, Signals: map[string]map[string]float64{sig: {}}}
	for i, x := range vals {
		inst := string(rune('a' + i))
		v.Instances = append(v.Instances, inst)
		v.Signals[sig][inst] = x
	}
	return v
}

// overloaded are the alerting instance's own signals: overload, nothing else.
var overloaded = vocab.Signals{vocab.SigQueueDepth: 48, vocab.SigRunning: 31, vocab.SigKVUsage: 0.1, vocab.SigQueueWait: 14,
	vocab.SigPrefillMean: 0.06, vocab.SigTTFTP99: 4.9, vocab.SigAbortRatio: 0, vocab.SigITLP99: 0.02, vocab.SigPromptTokens: 300}

func TestScopeOverDiagnose(t *testing.T) {
	cases := []struct {
		name      string
		sig       vocab.Signals
		view      *views.PeerView
		scope     string
		line      string
		factor    string // contributing factor the scope added ("" none)
		notFactor string
	}{
		{"one of six overloaded", overloaded, fleet(vocab.SigQueueDepth, 48, 0, 0, 1, 0, 2),
			vocab.ScopeSingle, "only this instance: queue 48 vs peers' median 0 (5 peers)", vocab.FactorSingleInstance, vocab.FactorFleetWide},
		{"five of six", overloaded, fleet(vocab.SigQueueDepth, 48, 30, 40, 12, 0, 20),
			vocab.ScopeFleet, "fleet-wide: 5 of 6 instances have queue >= 10", vocab.FactorFleetWide, vocab.FactorSingleInstance},
		{"half is several, not fleet", overloaded, fleet(vocab.SigQueueDepth, 48, 30, 40, 0, 0, 0),
			vocab.ScopeSeveral, "3 of 6 instances have queue >= 10", "", vocab.FactorSingleInstance},
		{"one peer is not enough", overloaded, fleet(vocab.SigQueueDepth, 48, 0),
			"", "scope not measured: fewer than 2 peers with queue_depth", "", vocab.FactorSingleInstance},
		{"the alert had no model label", overloaded, &views.PeerView{Self: "a", Label: "instance"},
			"", "scope not measured: the peers step had no selector", "", vocab.FactorSingleInstance},
		{"no peers step", overloaded, nil,
			"", "scope not measured: no view of the model's other instances", "", vocab.FactorSingleInstance},
		{"peers lack the defining signal", overloaded, fleet(vocab.SigITLP99, 0.02, 0.02, 0.02),
			"", "scope not measured: fewer than 2 peers with queue_depth", "", vocab.FactorSingleInstance},
		{"kv-pressure by its pool", vocab.Signals{vocab.SigKVUsage: 0.99, vocab.SigQueueDepth: 2}, fleet(vocab.SigKVUsage, 0.99, 0.97, 0.98, 0.5),
			vocab.ScopeFleet, "fleet-wide: 3 of 4 instances have KV usage >= 95%", vocab.FactorFleetWide, ""},
		{"decode-bound by ITL", vocab.Signals{vocab.SigITLP99: 0.4, vocab.SigRunning: 100, vocab.SigQueueDepth: 0}, fleet(vocab.SigITLP99, 0.4, 0.03, 0.03, 0.05),
			vocab.ScopeSingle, "only this instance: ITL p99 0.4 s vs peers' median 0.03 s (3 peers)", vocab.FactorSingleInstance, ""},
		{"unexplained by the slow one, ITL", vocab.Signals{vocab.SigITLP99: 0.5, vocab.SigRunning: 4, vocab.SigTTFTP99: 0.3}, fleet(vocab.SigITLP99, 0.5, 0.6, 0.7),
			vocab.ScopeFleet, "fleet-wide: 3 of 3 instances have ITL p99 >= 0.2 s", vocab.FactorFleetWide, ""},
		{"client-aborts", vocab.Signals{vocab.SigAbortRatio: 0.2, vocab.SigTTFTP99: 0.3}, fleet(vocab.SigAbortRatio, 0.2, 0, 0.01),
			vocab.ScopeSingle, "only this instance: abort ratio 20% vs peers' median 0.5% (2 peers)", vocab.FactorSingleInstance, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, _ := diagnose(c.sig, nil, Thresholds{}, false, beyond{peers: c.view})
			if v.Scope != c.scope {
				t.Errorf("scope %q, want %q (evidence %q)", v.Scope, c.scope, v.Evidence)
			}
			if l := vocab.ScopeLine(v); !strings.HasPrefix(l, c.line) {
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
	v, _ := diagnose(vocab.Signals{vocab.SigQueueDepth: 0, vocab.SigTTFTP99: 0.1}, nil, Thresholds{}, false, beyond{peers: fleet(vocab.SigQueueDepth, 0, 30, 40)})
	if v.ID != vocab.VerdictHealthy || v.Scope != "" || vocab.ScopeLine(v) != "" || len(v.Contributing) != 0 {
		t.Errorf("healthy: scope %q, line %q, contributing %q", v.Scope, vocab.ScopeLine(v), v.Contributing)
	}
}

func TestScopeFleetShareThreshold(t *testing.T) {
	view := fleet(vocab.SigQueueDepth, 48, 30, 40, 0, 0, 0) // 3 of 6
	v, _ := diagnose(overloaded, nil, Thresholds{FleetShare: 0.4}, false, beyond{peers: view})
	if v.Scope != vocab.ScopeFleet {
		t.Errorf("fleet_share 0.4, 3 of 6: scope %q, want fleet-wide", v.Scope)
	}
}

// imbalanced: this instance takes 3× its peers' median request rate with
// the same prompt and output lengths.
func imbalanced(prompt float64) *views.PeerView {
	v := fleet(vocab.SigQueueDepth, 48, 0, 1, 0)
	v.Signals[vocab.SigRequestRate] = map[string]float64{"a": 6.1, "b": 2.0, "c": 2.1, "d": 1.9}
	v.Signals[vocab.SigPromptTokens] = map[string]float64{"a": prompt, "b": 340, "c": 330, "d": 345}
	v.Signals[vocab.SigOutputTokens] = map[string]float64{"a": 200, "b": 210, "c": 190, "d": 205}
	return v
}

func TestScopeRoutingImbalance(t *testing.T) {
	v, _ := diagnose(overloaded, nil, Thresholds{}, false, beyond{peers: imbalanced(350)})
	want := "receives 3.0× its peers' median request rate (6.1 vs 2.0 req/s) with the same per-request work (prompt 350 vs 340 tokens, output 200 vs 205 tokens): a load-balancer or session-affinity problem"
	if !slices.Contains(v.Evidence, want) {
		t.Errorf("evidence %q, want %q", v.Evidence, want)
	}
	if !slices.Contains(v.Contributing, vocab.FactorRoutingImbalance) || v.Scope != vocab.ScopeSingle {
		t.Errorf("contributing %q scope %q, want routing-imbalance and single-instance", v.Contributing, v.Scope)
	}
	// Prompts twice as long: different work, so not the router's doing.
	v, _ = diagnose(overloaded, nil, Thresholds{}, false, beyond{peers: imbalanced(700)})
	if slices.Contains(v.Contributing, vocab.FactorRoutingImbalance) {
		t.Errorf("longer prompts: contributing %q, want no routing-imbalance", v.Contributing)
	}
	// A stricter ratio than 3×.
	v, _ = diagnose(overloaded, nil, Thresholds{ImbalanceRatio: 4}, false, beyond{peers: imbalanced(350)})
	if slices.Contains(v.Contributing, vocab.FactorRoutingImbalance) {
		t.Errorf("imbalance_ratio 4: contributing %q, want no routing-imbalance", v.Contributing)
	}
	// Past its capacity it finishes only what it can (1.6× its peers), but
	// arrivals (admitted + the queue's growth) say what it was sent: 3×.
	p := imbalanced(350)
	p.Signals[vocab.SigRequestRate]["a"] = 3.2
	p.Signals[vocab.SigArrivalRate] = map[string]float64{"a": 7.4, "b": 2.5, "c": 2.4, "d": 2.6}
	v, _ = diagnose(overloaded, nil, Thresholds{}, false, beyond{peers: p})
	want = "receives 3.0× its peers' median arrival rate (7.4 vs 2.5 req/s) with the same per-request work (prompt 350 vs 340 tokens, output 200 vs 205 tokens): a load-balancer or session-affinity problem"
	if !slices.Contains(v.Evidence, want) {
		t.Errorf("capped finishes, arrivals 3×: evidence %q, want %q", v.Evidence, want)
	}
	// Over a 15 s window 7.4 vs 2.5 req/s is 111 vs 38 requests: 6 sigma.
	// 1.0 vs 0.5 req/s is 15 vs 8 (the fleet proof saw 0.9 vs 0.4): chance.
	p.Window = 15
	if v, _ = diagnose(overloaded, nil, Thresholds{}, false, beyond{peers: p}); !slices.Contains(v.Contributing, vocab.FactorRoutingImbalance) {
		t.Errorf("111 vs 38 requests in 15 s: contributing %q, want routing-imbalance", v.Contributing)
	}
	p.Signals[vocab.SigArrivalRate] = map[string]float64{"a": 1.0, "b": 0.5, "c": 0.45, "d": 0.55}
	if v, _ = diagnose(overloaded, nil, Thresholds{}, false, beyond{peers: p}); slices.Contains(v.Contributing, vocab.FactorRoutingImbalance) {
		t.Errorf("15 vs 8 requests in 15 s: contributing %q, want no routing-imbalance (noise)", v.Contributing)
	}
}

// TestScopeThroughTriageStep reads the PeerView from the prior results as
// the peers step wrote it and as a resumed run decodes it from JSON.
func TestScopeThroughTriageStep(t *testing.T) {
	view := fleet(vocab.SigQueueDepth, 48, 0, 0, 1, 0, 2)
	b, err := json.Marshal(map[string]any{views.FindingPeers: view})
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	for name, findings := range map[string]map[string]any{
		"struct":  {views.FindingPeers: view},
		"decoded": decoded,
	} {
		t.Run(name, func(t *testing.T) {
			step, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			prior := map[string]*vocab.Result{"snapshot": {Signals: overloaded}, "peers": {Findings: findings}}
			res, err := step.Run(context.Background(), &vocab.Input{Prior: prior})
			if err != nil {
				t.Fatal(err)
			}
			v := res.Verdict
			if v.ID != vocab.VerdictOverload || v.Scope != vocab.ScopeSingle || !slices.Contains(v.Contributing, vocab.FactorSingleInstance) {
				t.Fatalf("verdict %s scope %q contributing %q", v.ID, v.Scope, v.Contributing)
			}
			if l := vocab.ScopeLine(v); l != "only this instance: queue 48 vs peers' median 0 (5 peers)" {
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
		if _, err := New(Config{Thresholds: th}); err == nil {
			t.Errorf("%+v: accepted", th)
		}
	}
	if _, err := New(Config{Thresholds: Thresholds{ImbalanceRatio: 3}}); err != nil {
		t.Errorf("imbalance_ratio 3 (a ratio above 1 by design): %v", err)
	}
}
