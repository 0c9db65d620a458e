package handlers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeRuns is an in-memory run service: one run per unresolved fingerprint.
type fakeRuns struct {
	mu       sync.Mutex
	runs     []*runs.Run
	open     map[string]*runs.Run
	calls    int
	err      error // returned by Accept and Ping when set
	lastList runs.ListQuery
}

func newFakeRuns() *fakeRuns { return &fakeRuns{open: map[string]*runs.Run{}} }

func (f *fakeRuns) Accept(_ context.Context, alerts []template.Alert) ([]runs.Accepted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	acks := make([]runs.Accepted, len(alerts))
	for i, a := range alerts {
		r, ok := f.open[a.Fingerprint]
		switch {
		case a.Status == "resolved" && ok:
			r.ResolvedAt = &a.EndsAt
			delete(f.open, a.Fingerprint)
			acks[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: r.ID, Outcome: runs.OutcomeResolved}
		case a.Status == "resolved":
			acks[i] = runs.Accepted{Fingerprint: a.Fingerprint, Outcome: runs.OutcomeResolvedUnknown}
		case ok:
			acks[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: r.ID, Outcome: runs.OutcomeDeduplicated}
		default:
			r = &runs.Run{ID: fmt.Sprintf("run-%d", len(f.runs)+1), Fingerprint: a.Fingerprint,
				Alertname: a.Labels["alertname"], Status: vocab.StatusQueued}
			f.runs = append(f.runs, r)
			f.open[a.Fingerprint] = r
			acks[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: r.ID, Outcome: runs.OutcomeAccepted}
		}
	}
	return acks, nil
}

func (f *fakeRuns) List(_ context.Context, q runs.ListQuery) (runs.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastList = q
	if q.Cursor != "" {
		return runs.Page{}, fmt.Errorf("%w: %q", runs.ErrBadCursor, q.Cursor) // the fake hands out none
	}
	var out []runs.Run
	for i := len(f.runs) - 1; i >= 0 && len(out) < q.Limit; i-- {
		if q.Alertname == "" || f.runs[i].Alertname == q.Alertname {
			out = append(out, *f.runs[i])
		}
	}
	return runs.Page{Runs: out}, nil
}

func (f *fakeRuns) find(id string) (*runs.Run, error) {
	for _, r := range f.runs {
		if r.ID == id {
			return r, nil
		}
	}
	return nil, fmt.Errorf("fake: run %s: %w", id, runs.ErrNotFound)
}

func (f *fakeRuns) Get(_ context.Context, id string) (*runs.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(id)
}

func (f *fakeRuns) Cancel(_ context.Context, id string) (*runs.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.find(id)
	if err != nil {
		return nil, err
	}
	if r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning {
		return r, fmt.Errorf("fake: run %s is %s: %w", id, r.Status, runs.ErrFinished)
	}
	r.Status = vocab.StatusCancelled
	return r, nil
}

func (f *fakeRuns) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeRuns) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// harness is a Server over a fakeRuns, with its registry and observed logs.
type harness struct {
	srv  *Server
	runs *fakeRuns
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
}

func newHarness(t *testing.T, mod func(*Options)) *harness {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	h := &harness{runs: newFakeRuns(), reg: prometheus.NewRegistry(), logs: logs}
	o := Options{Runs: h.runs, Registry: h.reg, Log: zap.New(core), MaxBodyBytes: 1 << 20}
	if mod != nil {
		mod(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.srv = srv
	return h
}

// do serves one request and returns the recorder.
func (h *harness) do(method, path string, body []byte, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json") // as Alertmanager and the API's clients send
	}
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

func withToken(token string) func(*Options) {
	return func(o *Options) { o.Auth = config.Auth{BearerToken: config.Secret(token)} }
}

// serve serves a prepared request.
func serve(h *harness, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}
