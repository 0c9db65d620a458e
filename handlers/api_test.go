package handlers

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestRunsAPI(t *testing.T) {
	h := newHarness(t, withToken("tok"))
	auth := bearer("tok")
	if rec := h.do("POST", "/hooks/alertmanager", body(alertJSON("A", "1111111111111111", "firing"),
		alertJSON("B", "2222222222222222", "firing")), auth); rec.Code != 200 {
		t.Fatalf("seed webhook: %d %s", rec.Code, rec.Body)
	}
	h.runs.runs[1].Status = vocab.StatusSucceeded // run-2 has finished
	tests := []struct {
		name    string
		method  string
		path    string
		header  http.Header
		code    int
		errWord string
		check   func(t *testing.T, b []byte)
	}{
		{name: "list newest first", method: "GET", path: "/api/v1/runs", header: auth, code: 200,
			check: wantRunIDs("run-2", "run-1")},
		{name: "list by alertname", method: "GET", path: "/api/v1/runs?alertname=A&limit=5", header: auth, code: 200,
			check: wantRunIDs("run-1")},
		{name: "list with limit", method: "GET", path: "/api/v1/runs?limit=1", header: auth, code: 200, check: wantRunIDs("run-2")},
		{name: "list with a bad limit", method: "GET", path: "/api/v1/runs?limit=0", header: auth, code: 400, errWord: "bad_query"},
		{name: "list with a huge limit", method: "GET", path: "/api/v1/runs?limit=100000", header: auth, code: 400, errWord: "bad_query"},
		{name: "list with a cursor no page handed out", method: "GET", path: "/api/v1/runs?cursor=nope", header: auth, code: 400, errWord: "bad_query"},
		{name: "list with an unknown status", method: "GET", path: "/api/v1/runs?status=done", header: auth, code: 400, errWord: "bad_query"},
		{name: "list needs auth", method: "GET", path: "/api/v1/runs", code: 401, errWord: "unauthorized"},
		{name: "get one", method: "GET", path: "/api/v1/runs/run-1", header: auth, code: 200,
			check: func(t *testing.T, b []byte) {
				if !strings.Contains(string(b), `"id":"run-1"`) {
					t.Errorf("body %s lacks run-1", b)
				}
			}},
		{name: "get unknown", method: "GET", path: "/api/v1/runs/nope", header: auth, code: 404, errWord: "not_found"},
		{name: "cancel finished", method: "POST", path: "/api/v1/runs/run-2/cancel", header: auth, code: 409, errWord: "finished"},
		{name: "cancel unknown", method: "POST", path: "/api/v1/runs/nope/cancel", header: auth, code: 404, errWord: "not_found"},
		{name: "cancel needs auth", method: "POST", path: "/api/v1/runs/run-1/cancel", code: 401, errWord: "unauthorized"},
		{name: "cancel queued", method: "POST", path: "/api/v1/runs/run-1/cancel", header: auth, code: 200,
			check: func(t *testing.T, b []byte) {
				if !strings.Contains(string(b), `"status":"cancelled"`) {
					t.Errorf("body %s: run not cancelled", b)
				}
			}},
		{name: "cancel with GET", method: "GET", path: "/api/v1/runs/run-1/cancel", header: auth, code: 405, errWord: "method_not_allowed"},
		{name: "unknown route", method: "GET", path: "/api/v2/runs", header: auth, code: 404, errWord: "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(tt.method, tt.path, nil, tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if tt.errWord != "" {
				checkErrorBody(t, rec.Body.Bytes(), tt.errWord)
			}
			if tt.check != nil {
				tt.check(t, rec.Body.Bytes())
			}
		})
	}
}

func wantRunIDs(ids ...string) func(t *testing.T, b []byte) {
	return func(t *testing.T, b []byte) {
		t.Helper()
		var page struct {
			Runs []runs.Run `json:"runs"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("list body: %v: %s", err, b)
		}
		var got []string
		for _, r := range page.Runs {
			got = append(got, r.ID)
		}
		if strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Errorf("runs %v, want %v", got, ids)
		}
	}
}

func TestOperationalEndpoints(t *testing.T) {
	reloadErr := errors.New("playbooks/vllm.yaml:12:3: unknown kind \"promql\"\nplaybooks/vllm.yaml:20:5: bad glob")
	var reloads int
	reload := func() error { reloads++; return reloadErr }
	tests := []struct {
		name     string
		method   string
		path     string
		header   http.Header
		storeErr error
		reload   func() error
		code     int
		contains string
	}{
		{name: "healthy", method: "GET", path: "/-/healthy", code: 200, contains: "healthy"},
		{name: "healthy while the store is down", method: "GET", path: "/-/healthy", storeErr: errors.New("down"), code: 200},
		{name: "ready", method: "GET", path: "/-/ready", code: 200, contains: "ready"},
		{name: "not ready when the store is down", method: "GET", path: "/-/ready", storeErr: errors.New("connection refused"), code: 503, contains: "connection refused"},
		{name: "metrics without auth", method: "GET", path: "/metrics", code: 200, contains: `autocapture_alerts_total{outcome="accepted"} 0`},
		{name: "reload ok", method: "POST", path: "/-/reload", header: bearer("tok"), reload: func() error { return nil }, code: 200},
		{name: "reload failure names file and line", method: "POST", path: "/-/reload", header: bearer("tok"), reload: reload, code: 500, contains: "vllm.yaml:12:3"},
		{name: "reload needs auth", method: "POST", path: "/-/reload", reload: reload, code: 401},
		{name: "reload by GET", method: "GET", path: "/-/reload", header: bearer("tok"), reload: reload, code: 405},
		{name: "reload not wired", method: "POST", path: "/-/reload", header: bearer("tok"), code: 501},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(o *Options) {
				withToken("tok")(o)
				o.Reload = tt.reload
			})
			h.runs.setErr(tt.storeErr)
			rec := h.do(tt.method, tt.path, nil, tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tt.contains) {
				t.Errorf("body %s lacks %q", rec.Body, tt.contains)
			}
		})
	}
	if reloads != 1 {
		t.Errorf("reloader called %d times, want 1 (only the authenticated POST)", reloads)
	}
}

func TestReloadFailureBody(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Reload = func() error { return errors.New("a.yaml:1:1: first\nb.yaml:2:2: second") }
	})
	rec := h.do("POST", "/-/reload", nil, nil)
	var e errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if e.Reason != "a.yaml:1:1: first (and 1 more)" || len(e.Errors) != 2 || e.Errors[1] != "b.yaml:2:2: second" {
		t.Errorf("reload error body = %+v", e)
	}
}
