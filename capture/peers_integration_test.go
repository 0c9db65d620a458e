package capture_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/capture/peers"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// simInstance is one stand-in vLLM of a fleet: its model, scenario and seed
// (0: one of its own).
type simInstance struct {
	model, scenario string
	seed            uint64
}

// fleetUnderPrometheus runs the fleet under a real Prometheus
// (capture.SimsUnderPrometheus) and returns the instances' host:ports in
// order and a proxy URL in front of Prometheus that counts the queries
// naming a model_name (the peers step's; the snapshot's name the instance).
func fleetUnderPrometheus(tb testing.TB, fleet []simInstance) (insts []string, promURL string, peerQueries *atomic.Int64) {
	tb.Helper()
	opts := make([]vllmsim.Options, len(fleet))
	for i, f := range fleet {
		if f.seed == 0 {
			f.seed = uint64(20 + i)
		}
		opts[i] = vllmsim.Options{Model: f.model, Scenario: f.scenario, Seed: f.seed}
	}
	insts, prom := capture.SimsUnderPrometheus(tb, opts...)
	target, _ := url.Parse(prom.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	peerQueries = &atomic.Int64{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the client POSTs its form: read it, then pass it on
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if q := form.Get("query") + r.URL.Query().Get("query"); strings.Contains(q, "model_name=") {
			peerQueries.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(proxy.Close)
	return insts, proxy.URL, peerQueries
}

// queueDeepPlan plans the shipped queue-deep playbook for inst of model.
func queueDeepPlan(tb testing.TB, inst, model string) (*playbooks.Plan, template.Alert) {
	tb.Helper()
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	alert := template.Alert{Status: "firing", StartsAt: now.Add(-time.Minute), Fingerprint: "peers-" + inst,
		Labels: template.KV{"alertname": "VLLMQueueDeep", "instance": inst, "model_name": model, "severity": "page"}}
	plans, err := set.Plan(alert, vocab.Window{Start: now.Add(-10 * time.Minute), End: now})
	if err != nil || len(plans) != 1 {
		tb.Fatalf("plans %v, %v", plans, err)
	}
	return plans[0], alert
}

func promEnv(tb testing.TB, promURL string) *vocab.Env {
	store, err := storage.NewLocal(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return &vocab.Env{Store: store, Targets: &http.Client{}, Prometheus: &vocab.Endpoint{URL: promURL, Timeout: 10 * time.Second}}
}

// TestPeersAgainstRealPrometheus runs the shipped peers step and triage over
// two models on one real Prometheus: model "m" with one overloaded instance
// among three healthy ones (single-instance), model "f" with all four
// overloaded (fleet-wide); and counts the peers step's queries, which must
// not grow with the fleet it sees.
func TestPeersAgainstRealPrometheus(t *testing.T) {
	t.Parallel() // waits on real time and a Prometheus of its own
	var fleet []simInstance
	for _, f := range []struct{ model, scenario string }{{"m", vllmsim.ScenarioOverload}, {"m", vllmsim.ScenarioHealthy},
		{"m", vllmsim.ScenarioHealthy}, {"m", vllmsim.ScenarioHealthy}, {"f", vllmsim.ScenarioOverload},
		{"f", vllmsim.ScenarioOverload}, {"f", vllmsim.ScenarioOverload}, {"f", vllmsim.ScenarioOverload}} {
		fleet = append(fleet, simInstance{model: f.model, scenario: f.scenario})
	}
	insts, promURL, peerQueries := fleetUnderPrometheus(t, fleet)
	env := promEnv(t, promURL)
	cases := []struct {
		name, inst, model, scope, line, factor string
	}{
		{"one of four", insts[0], "m", vocab.ScopeSingle, "only this instance: queue ", vocab.FactorSingleInstance},
		{"all four", insts[4], "f", vocab.ScopeFleet, "fleet-wide: 4 of 4 instances have queue >= 10", vocab.FactorFleetWide},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, alert := queueDeepPlan(t, c.inst, c.model)
			before := peerQueries.Load()
			prior := runTier(t, plan, vocab.TierMetrics, alert, env, nil)
			sent := peerQueries.Load() - before
			pv, _ := prior["peers"].Findings[views.FindingPeers].(*views.PeerView)
			if pv == nil {
				t.Fatalf("peers findings %v", prior["peers"].Findings)
			}
			if len(pv.Instances) != 4 || pv.Self != c.inst || len(pv.Failed) != 0 {
				t.Fatalf("view: self %s, instances %v, failed %v", pv.Self, pv.Instances, pv.Failed)
			}
			for _, sig := range []string{vocab.SigQueueDepth, vocab.SigArrivalRate, vocab.SigKVUsage, vocab.SigRequestRate,
				vocab.SigAbortRatio, vocab.SigPromptTokens, vocab.SigOutputTokens, vocab.SigTTFTP99} {
				if len(pv.Signals[sig]) != 4 {
					t.Errorf("%s for %d instances, want 4: %v", sig, len(pv.Signals[sig]), pv.Signals[sig])
				}
			}
			if want := int64(len(pv.Signals) + len(pv.Failed)); sent < 9 || sent > int64(len(vocab.SignalNames)) || sent < want {
				t.Errorf("%d peers queries for %d signals", sent, want)
			}
			v := runTier(t, plan, vocab.TierTriage, alert, env, prior)["triage"].Verdict
			if v.ID != vocab.VerdictOverload || v.Scope != c.scope || !strings.HasPrefix(vocab.ScopeLine(v), c.line) {
				t.Fatalf("verdict %s %v scope %q line %q, want overload %s %q\nevidence %q\nqueue %v", v.ID, v.Contributing,
					v.Scope, vocab.ScopeLine(v), c.scope, c.line, v.Evidence, pv.Signals[vocab.SigQueueDepth])
			}
			if !contains(v.Contributing, c.factor) {
				t.Errorf("contributing %v, want %s", v.Contributing, c.factor)
			}
			t.Logf("%s: %s; %s", c.name, prior["peers"].Summary, vocab.ScopeLine(v))
		})
	}
	t.Run("queries constant in the fleet's size", func(t *testing.T) {
		counts := map[int]int64{}
		for _, sel := range []string{`model_name="m"`, fmt.Sprintf(`model_name="m",instance=%q`, insts[0])} {
			plan, alert := queueDeepPlan(t, insts[0], "m")
			step := peersStepOf(t, plan, sel)
			before := peerQueries.Load()
			res, err := step.Run(context.Background(), &vocab.Input{RunID: "count", StepID: "peers", Alert: alert, Env: env,
				Window: vocab.Window{Start: time.Now().Add(-10 * time.Minute), End: time.Now()}})
			if err != nil {
				t.Fatal(err)
			}
			n := len(res.Findings[views.FindingPeers].(*views.PeerView).Instances)
			counts[n] = peerQueries.Load() - before
		}
		if len(counts) != 2 || counts[4] == 0 || counts[4] != counts[1] {
			t.Errorf("queries by fleet size %v, want the same for 4 instances and for 1", counts)
		}
	})
}

// peersStepOf rebuilds the plan's peers step with another selector.
func peersStepOf(tb testing.TB, plan *playbooks.Plan, selector string) vocab.Step {
	tb.Helper()
	for _, ps := range plan.Steps {
		if cfg, ok := ps.Config.(*peers.Config); ok {
			c := *cfg
			c.Selector = selector
			st, err := peers.New(c)
			if err != nil {
				tb.Fatal(err)
			}
			return st
		}
	}
	tb.Fatal("the plan has no peers step")
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
