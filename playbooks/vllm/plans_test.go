package vllm_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

var updatePlans = flag.Bool("update-plans", false, "rewrite testdata/plans.golden.json from the shipped playbooks")

// goldenStep is what a planned step does, without where its text sits in a file.
type goldenStep struct {
	ID              string        `json:"id"`
	Kind            string        `json:"kind"`
	Tier            string        `json:"tier"`
	Timeout         time.Duration `json:"timeout"`
	ContinueOnError bool          `json:"continue_on_error"`
	When            string        `json:"when"`
	Cooldown        time.Duration `json:"cooldown"`
	CooldownKey     string        `json:"cooldown_key"`
	Config          any           `json:"config"`
	Built           bool          `json:"built"`
	RenderErr       string        `json:"render_err"`
}

// goldenPlan is one playbook's plan for one sample alert.
type goldenPlan struct {
	Alert         string        `json:"alert"`
	Playbook      string        `json:"playbook"`
	Timeout       time.Duration `json:"timeout"`
	Cooldown      time.Duration `json:"cooldown"`
	CooldownKey   string        `json:"cooldown_key"`
	MaxConcurrent int           `json:"max_concurrent"`
	Steps         []goldenStep  `json:"steps"`
}

// TestShippedPlansMatchGolden plans every shipped playbook for a complete alert
// and for one that lacks the instance label, and compares the plans step by step
// with testdata/plans.golden.json. The golden file was written from the shipped
// playbooks as they were before they shared steps through presets, so it proves
// the rewrite kept what each playbook does: same steps, order, tiers, timeouts,
// conditions, rendered configs and render failures.
func TestShippedPlansMatchGolden(t *testing.T) {
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := vocab.Window{Start: start.Add(-10 * time.Minute), End: start.Add(time.Minute)}
	alerts := map[string]template.KV{
		"complete":    {"instance": "10.0.0.7:8000", "model_name": "m", "severity": "page"},
		"no-instance": {"model_name": "m"},
	}
	var got []goldenPlan
	for _, name := range []string{"complete", "no-instance"} {
		for _, pb := range set.Playbooks {
			if !strings.HasPrefix(pb.File, playbooks.EmbeddedPrefix) {
				continue // the golden file holds vLLM's plans; SGLang's are tested by their own tests
			}
			a := template.Alert{Status: "firing", StartsAt: start, Fingerprint: "f00d", Labels: template.KV{}}
			for k, v := range alerts[name] {
				a.Labels[k] = v
			}
			got = append(got, golden(name, pb.Plan(a, w)))
		}
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	const path = "testdata/plans.golden.json"
	if *updatePlans {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []goldenPlan
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	var gotRound []goldenPlan // the same JSON round trip as want, so configs compare alike
	if err := json.Unmarshal(b, &gotRound); err != nil {
		t.Fatal(err)
	}
	if len(gotRound) != len(want) {
		t.Fatalf("%d plans, golden has %d", len(gotRound), len(want))
	}
	for i := range want {
		g, wp := gotRound[i], want[i]
		g.Steps, wp.Steps = nil, nil
		if !jsonEqual(t, g, wp) {
			t.Errorf("plan %s/%s: got %+v, want %+v", want[i].Alert, want[i].Playbook, g, wp)
			continue
		}
		gs, ws := gotRound[i].Steps, want[i].Steps
		for j := 0; j < max(len(gs), len(ws)); j++ {
			switch {
			case j >= len(gs):
				t.Errorf("plan %s/%s: step %d %s missing", want[i].Alert, want[i].Playbook, j, ws[j].ID)
			case j >= len(ws):
				t.Errorf("plan %s/%s: extra step %d %s", want[i].Alert, want[i].Playbook, j, gs[j].ID)
			case !jsonEqual(t, gs[j], ws[j]):
				t.Errorf("plan %s/%s: step %d differs:\n got %s\nwant %s", want[i].Alert, want[i].Playbook, j, mustJSON(t, gs[j]), mustJSON(t, ws[j]))
			}
		}
	}
}

func golden(alert string, p *playbooks.Plan) goldenPlan {
	gp := goldenPlan{Alert: alert, Playbook: p.Playbook, Timeout: p.Timeout, Cooldown: p.Cooldown,
		CooldownKey: p.CooldownKey, MaxConcurrent: p.MaxConcurrent}
	for _, st := range p.Steps {
		gs := goldenStep{ID: st.ID, Kind: st.Kind, Tier: st.Tier.String(), Timeout: st.Timeout,
			ContinueOnError: st.ContinueOnError, Cooldown: st.Cooldown, CooldownKey: st.CooldownKey,
			Config: st.Config, Built: st.Step != nil}
		if st.When != nil {
			gs.When = st.When.Source
		}
		if st.RenderErr != nil {
			gs.RenderErr = st.RenderErr.Error()
		}
		gp.Steps = append(gp.Steps, gs)
	}
	return gp
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonEqual(t *testing.T, a, b any) bool { return bytes.Equal(mustJSON(t, a), mustJSON(t, b)) }
