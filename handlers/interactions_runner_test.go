package handlers

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// noPlans matches no playbook: the runs here are only stored, never executed.
type noPlans struct{}

func (noPlans) Plan(template.Alert, vocab.Window) ([]*playbooks.Plan, error) { return nil, nil }
func (noPlans) Rebuild(playbooks.StoredPlan, template.Alert, vocab.Window) (*playbooks.Plan, error) {
	return nil, nil
}

// TestSlackClickRecordedOnTheRun: through the real run service on SQLite, a
// signed click shows on GET /api/v1/runs/{id} and in
// autocapture_verdict_feedback_total; the same user's second answer replaces
// the first; a click on a run this store does not know is answered 200 and
// neither recorded nor counted.
func TestSlackClickRecordedOnTheRun(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	h := &harness{reg: prometheus.NewRegistry(), logs: logs}
	log := zap.New(core)
	ctx := context.Background()
	svc, err := runner.Open(ctx, runner.Options{Config: config.Default().Runs, SQLitePath: filepath.Join(t.TempDir(), "a.db"),
		Planner: noPlans{}, Log: zap.NewNop(), Registerer: h.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	acc, err := svc.Accept(ctx, []template.Alert{{Status: "firing", Fingerprint: "fp1", StartsAt: clickNow.Add(-10 * time.Minute),
		Labels: template.KV{"alertname": "VLLMHighTTFT"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := acc[0].RunID
	srv, err := New(Options{Runs: svc, Feedback: svc, Registry: h.reg, Log: log,
		SlackSigningSecret: signingSecret, Now: func() time.Time { return clickNow }})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	click := func(action, value string, at time.Time) {
		t.Helper()
		b := clickBody(action, value)
		if rec := h.do("POST", interactions, b, signed(signingSecret, at, b)); rec.Code != 200 {
			t.Fatalf("click %s on %s: code %d (%s)", action, value, rec.Code, rec.Body)
		}
	}
	count := func(correct string) float64 {
		return feedbackCounter(t, h, vocab.VerdictKVPressure, correct)
	}

	click(slacknotify.ActionVerdictRight, slacknotify.FeedbackValue(id, vocab.VerdictKVPressure), clickNow.Add(-time.Minute))
	click(slacknotify.ActionVerdictWrong, slacknotify.FeedbackValue(id, vocab.VerdictKVPressure), clickNow)
	click(slacknotify.ActionVerdictRight, slacknotify.FeedbackValue("no-such-run", vocab.VerdictKVPressure), clickNow)

	rec := h.do("GET", "/api/v1/runs/"+id, nil, nil)
	var got runs.Run
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("GET run: %d %s", rec.Code, rec.Body)
	}
	if len(got.Feedback) != 1 || got.Feedback[0].Correct || got.Feedback[0].User.ID != "U0ALICE" ||
		got.Feedback[0].User.Name != "alice" || got.Feedback[0].Verdict != vocab.VerdictKVPressure {
		t.Fatalf("run shows feedback %+v, want alice's latest answer: wrong", got.Feedback)
	}
	if count("true") != 1 || count("false") != 1 {
		t.Errorf("counted %v right and %v wrong answers, want 1 and 1 (the unknown run not counted)", count("true"), count("false"))
	}
	if h.logs.FilterMessageSnippet("Verdict feedback ignored").FilterField(zap.String("run", "no-such-run")).Len() != 1 {
		t.Error("the click on an unknown run was not logged")
	}
}

// feedbackCounter reads one autocapture_verdict_feedback_total series from
// the shared registry.
func feedbackCounter(t *testing.T, h *harness, verdict, correct string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "autocapture_verdict_feedback_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if strings.Join(labels, ",") == "correct="+correct+",verdict="+verdict {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no autocapture_verdict_feedback_total{verdict=%q,correct=%q}", verdict, correct)
	return 0
}
