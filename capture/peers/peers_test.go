package peers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/vocab"
	"github.com/prometheus/alertmanager/template"
)

// peersQueries are a fleet's queries in the fake's vocabulary.
var peersQueries = []PeerQuery{
	{Signal: vocab.SigQueueDepth, Query: "sum by (instance) (waiting{$peers})"},
	{Signal: vocab.SigKVUsage, Query: "max by (instance) (kv{$peers})"},
	{Signal: vocab.SigITLP99, Query: "itl{$peers}"},
}

// fakeFleet answers the peers' queries: queue per instance (one NaN, one
// series without the instance label), KV for two, ITL a bad query.
func fakeFleet(t *testing.T, n *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_ = r.ParseForm()
		q := r.Form.Get("query")
		switch {
		case !strings.Contains(q, `{model_name="m"}`):
			badData(w)
		case strings.HasPrefix(q, "sum by (instance) (waiting"):
			ok(w, `{"resultType":"vector","result":[
				{"metric":{"instance":"a"},"value":[1800000000,"48"]},
				{"metric":{"instance":"b"},"value":[1800000000,"0"]},
				{"metric":{"instance":"c"},"value":[1800000000,"1"]},
				{"metric":{"instance":"d"},"value":[1800000000,"NaN"]},
				{"metric":{},"value":[1800000000,"7"]}]}`)
		case strings.HasPrefix(q, "max by (instance) (kv"):
			ok(w, `{"resultType":"vector","result":[
				{"metric":{"instance":"a"},"value":[1800000000,"0.2"]},
				{"metric":{"instance":"e"},"value":[1800000000,"0.3"]}]}`)
		default:
			badData(w)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func badData(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(400)
	_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`))
}

func peersInput(t *testing.T, url string, labels template.KV) *vocab.Input {
	in := promInput(t, url)
	in.StepID = "peers"
	in.Alert = template.Alert{Labels: labels}
	return in
}

func TestPeersStepBuildsTheView(t *testing.T) {
	var n atomic.Int32
	srv := fakeFleet(t, &n)
	step, err := New(Config{Selector: `model_name="m"`, Queries: peersQueries})
	if err != nil {
		t.Fatal(err)
	}
	res, err := step.Run(context.Background(), peersInput(t, srv.URL, template.KV{"instance": "a", "model_name": "m"}))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := res.Findings[views.FindingPeers].(*views.PeerView)
	if v == nil {
		t.Fatalf("findings %v: no PeerView", res.Findings)
	}
	if v.Self != "a" || v.Label != "instance" || strings.Join(v.Instances, ",") != "a,b,c,e" {
		t.Errorf("self %q label %q instances %q", v.Self, v.Label, v.Instances)
	}
	if q := v.Signals[vocab.SigQueueDepth]; len(q) != 3 || q["a"] != 48 || q["c"] != 1 {
		t.Errorf("queue per instance %v, want a 48, b 0, c 1 (NaN and unlabelled dropped)", q)
	}
	if f := v.Failed[vocab.SigITLP99]; !strings.HasPrefix(f, string(vocab.ReasonBadConfig)) {
		t.Errorf("failed %v, want itl_p99 bad-config", v.Failed)
	}
	if len(res.Signals) != 0 {
		t.Errorf("signals %v: the peers step gives none (triage's merge reads the instance's own)", res.Signals)
	}
	for _, want := range []string{`4 instances of {model_name="m"}`, "this one: queue_depth 48, peers' median 0.5", "3 queries", "1 failed: itl_p99 bad-config"} {
		if !strings.Contains(res.Summary, want) {
			t.Errorf("summary %q lacks %q", res.Summary, want)
		}
	}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Name != "peers.json" {
		t.Errorf("artifacts %+v, want peers.json", res.Artifacts)
	}
	if n.Load() != 3 {
		t.Errorf("%d requests, want one per signal (3)", n.Load())
	}
}

func TestPeersStepNotMeasured(t *testing.T) {
	cases := []struct {
		name     string
		selector string
		labels   template.KV
		want     string
	}{
		{"no model label", "", template.KV{"instance": "a"}, "peers not measured: the peers' selector is empty"},
		{"no instance label", `model_name="m"`, template.KV{"model_name": "m"}, "peers not measured: the alert has no instance label"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			srv := fakeFleet(t, &n)
			step, _ := New(Config{Selector: c.selector, Queries: peersQueries})
			res, err := step.Run(context.Background(), peersInput(t, srv.URL, c.labels))
			if err != nil {
				t.Fatalf("err %v: a missing label is a finding, not an error", err)
			}
			if !strings.HasPrefix(res.Summary, c.want) || n.Load() != 0 {
				t.Errorf("summary %q after %d requests, want %q and none", res.Summary, n.Load(), c.want)
			}
		})
	}
}

func TestPeersStepFailsOnlyWhenEveryQueryFailed(t *testing.T) {
	var n atomic.Int32
	srv := fakeFleet(t, &n)
	step, _ := New(Config{Selector: `model_name="other"`, Queries: peersQueries})
	res, err := step.Run(context.Background(), peersInput(t, srv.URL, template.KV{"instance": "a"}))
	if err == nil || vocab.Classify(err) != vocab.ReasonBadConfig || !strings.Contains(err.Error(), "all 3 queries failed") {
		t.Fatalf("err %v, want bad-config: all 3 queries failed", err)
	}
	if v, _ := res.Findings[views.FindingPeers].(*views.PeerView); v == nil || len(v.Failed) != 3 {
		t.Errorf("findings %v, want the view with 3 failures", res.Findings)
	}
}

func TestNewPeersRejects(t *testing.T) {
	cases := map[string]Config{
		"no queries":       {Selector: "x"},
		"unknown signal":   {Queries: []PeerQuery{{Signal: "nope", Query: "a{$peers}"}}},
		"duplicate signal": {Queries: []PeerQuery{{Signal: vocab.SigQueueDepth, Query: "a{$peers}"}, {Signal: vocab.SigQueueDepth, Query: "b{$peers}"}}},
		"no placeholder":   {Queries: []PeerQuery{{Signal: vocab.SigQueueDepth, Query: "sum by (instance) (a)"}}},
		"bad label":        {Label: "in-stance", Queries: []PeerQuery{{Signal: vocab.SigQueueDepth, Query: "a{$peers}"}}},
	}
	for name, cfg := range cases {
		if _, err := New(cfg); err == nil || vocab.Classify(err) != vocab.ReasonBadConfig {
			t.Errorf("%s: err %v, want bad-config", name, err)
		}
	}
}

// ok writes a Prometheus API success answer carrying data.
func ok(w http.ResponseWriter, data string) { steptest.PromOK(w, data) }

// promInput is an Input against url with a local store and a one-hour window.
func promInput(t testing.TB, url string) *vocab.Input { return steptest.PromInput(t, url) }
