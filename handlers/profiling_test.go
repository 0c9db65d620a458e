package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// TestProfilingKillSwitches drives the profiling API against the real run
// service on SQLite: the pause is persisted and refuses the guard's Acquire
// naming who paused, a stop request lands on the run's lease with who asked,
// a live lease cannot be cleared, and every call needs the API's auth.
func TestProfilingKillSwitches(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	h := &harness{reg: prometheus.NewRegistry(), logs: logs}
	ctx := context.Background()
	svc, err := runner.Open(ctx, runner.Options{Config: config.Default().Runs, SQLitePath: filepath.Join(t.TempDir(), "a.db"),
		Planner: noPlans{}, Log: zap.NewNop(), Registerer: h.reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	acc, err := svc.Accept(ctx, []template.Alert{
		{Status: "firing", Fingerprint: "fp1", StartsAt: time.Now(), Labels: template.KV{"alertname": "A"}},
		{Status: "firing", Fingerprint: "fp2", StartsAt: time.Now(), Labels: template.KV{"alertname": "B"}}})
	if err != nil {
		t.Fatal(err)
	}
	recording, idle := acc[0].RunID, acc[1].RunID
	auth := config.Auth{BasicAuth: &config.BasicAuth{Username: "alice", Password: "pw"}}
	h.srv, err = New(Options{Runs: svc, Profiling: svc.Profiling(), Registry: h.reg, Log: zap.New(core), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	alice := http.Header{"Authorization": {"Basic YWxpY2U6cHc="}} // alice:pw
	const tgt = "http://10.0.0.7:8000"

	pause := h.do("POST", "/api/v1/profiling/pause", []byte(`{"reason": "bad deploy in progress"}`), alice)
	if pause.Code != 200 || !strings.Contains(pause.Body.String(), `"paused":true`) || !strings.Contains(pause.Body.String(), `"paused_by":"alice"`) {
		t.Fatalf("pause: %d %s", pause.Code, pause.Body)
	}
	_, err = svc.Profiling().Acquire(ctx, vocab.LeaseRequest{Target: tgt, RunID: recording, StepID: "profile"})
	var refusal *vocab.ProfileRefusal
	if !errors.As(err, &refusal) || refusal.Reason != vocab.RefusedPaused ||
		!strings.HasPrefix(refusal.Detail, "paused by alice at ") || !strings.HasSuffix(refusal.Detail, ": bad deploy in progress") {
		t.Fatalf("acquire while paused: %v", err)
	}
	if logs.FilterMessage("Profiling paused through the API.").FilterField(zap.String("by", "alice")).Len() != 1 {
		t.Error("the pause is not in the audit log with who paused")
	}
	if rec := h.do("POST", "/api/v1/profiling/resume", nil, alice); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"resumed_by":"alice"`) {
		t.Fatalf("resume: %d %s", rec.Code, rec.Body)
	}
	l, err := svc.Profiling().Acquire(ctx, vocab.LeaseRequest{Target: tgt, RunID: recording, StepID: "profile"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Recording(ctx, 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, method, path, body string
		header                   http.Header
		code                     int
		errWord, want            string
	}{
		{"status needs auth", "GET", "/api/v1/profiling", "", nil, 401, "unauthorized", ""},
		{"pause needs auth", "POST", "/api/v1/profiling/pause", `{"reason":"x"}`, nil, 401, "unauthorized", ""},
		{"stop needs auth", "POST", "/api/v1/runs/" + recording + "/stop-profile", "", nil, 401, "unauthorized", ""},
		{"pause without a reason", "POST", "/api/v1/profiling/pause", `{}`, alice, 400, "bad_body", ""},
		{"pause with an unknown field", "POST", "/api/v1/profiling/pause", `{"reason":"x","for":"1h"}`, alice, 400, "bad_body", ""},
		{"status", "GET", "/api/v1/profiling", "", alice, 200, "",
			`"budget":{"active":1,"max_concurrent":1,"starts_last_hour":1,"max_per_hour":6}`},
		{"status shows the lease", "GET", "/api/v1/profiling", "", alice, 200, "", `"target":"` + tgt + `","run_id":"` + recording + `"`},
		{"stop an unknown run", "POST", "/api/v1/runs/nope/stop-profile", "", alice, 404, "not_found", ""},
		{"stop a run without a capture", "POST", "/api/v1/runs/" + idle + "/stop-profile", "", alice, 409, "no_capture", ""},
		{"stop the capture", "POST", "/api/v1/runs/" + recording + "/stop-profile", "", alice, 200, "", `"stop_requested_by":"alice"`},
		{"the run shows who stopped it", "GET", "/api/v1/runs/" + recording + "/profile", "", alice, 200, "",
			`"actor":"alice","event":"stop_requested"`},
		{"profile of an unknown run", "GET", "/api/v1/runs/nope/profile", "", alice, 404, "not_found", ""},
		{"clear without a target", "DELETE", "/api/v1/profiling/leases", "", alice, 400, "bad_query", ""},
		{"clear a free target", "DELETE", "/api/v1/profiling/leases?target=http://10.0.0.8:8000", "", alice, 404, "not_found", ""},
		{"clear a live lease", "DELETE", "/api/v1/profiling/leases?target=" + tgt, "", alice, 409, "not_stuck", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(tt.method, tt.path, []byte(tt.body), tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if tt.errWord != "" {
				checkErrorBody(t, rec.Body.Bytes(), tt.errWord)
			}
			if tt.want != "" && !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("body %s lacks %s", rec.Body, tt.want)
			}
		})
	}
	select {
	case <-l.StopRequested():
	default:
		t.Error("the stop request through the API did not reach the lease held in this process at once")
	}

	if err := l.StopFailed(ctx, "stop hung for 10m"); err != nil {
		t.Fatal(err)
	}
	rec := h.do("DELETE", "/api/v1/profiling/leases?target="+tgt, nil, alice)
	if rec.Code != 200 {
		t.Fatalf("clear a stuck lease: %d %s", rec.Code, rec.Body)
	}
	var st runs.ProfilingStatus
	rec = h.do("GET", "/api/v1/profiling", nil, alice)
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Leases) != 0 || st.Paused {
		t.Fatalf("status after the clear: %s (%v)", rec.Body, err)
	}
	rec = h.do("GET", "/api/v1/runs/"+recording+"/profile", nil, alice)
	if !strings.Contains(rec.Body.String(), `"actor":"alice","event":"cleared"`) {
		t.Errorf("the run's profile lacks the clear: %s", rec.Body)
	}
}

// TestProfilingRoutesNeedTheService: without Options.Profiling the routes do not exist.
func TestProfilingRoutesNeedTheService(t *testing.T) {
	h := newHarness(t, nil)
	if rec := h.do("GET", "/api/v1/profiling", nil, nil); rec.Code != 404 {
		t.Fatalf("GET /api/v1/profiling without the service: %d", rec.Code)
	}
}
