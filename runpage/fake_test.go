package runpage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// fakeRuns is the run service's reading side, in memory, newest last.
type fakeRuns struct {
	mu       sync.Mutex
	runs     []*runs.Run
	lastList runs.ListQuery
	err      error // answered by Get and List when set
}

func (f *fakeRuns) List(_ context.Context, q runs.ListQuery) (runs.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastList = q
	if f.err != nil {
		return runs.Page{}, f.err
	}
	if q.Cursor != "" {
		return runs.Page{}, fmt.Errorf("%w: %q", runs.ErrBadCursor, q.Cursor) // the fake hands out none
	}
	out := make([]runs.Run, 0, len(f.runs)) // the filters are the store's: the pages only hand them on
	for _, r := range slices.Backward(f.runs) {
		out = append(out, *r)
	}
	return runs.Page{Runs: out}, nil
}

func (f *fakeRuns) Get(_ context.Context, id string) (*runs.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	for _, r := range f.runs {
		if r.ID == id {
			c := *r
			return &c, nil
		}
	}
	return nil, fmt.Errorf("fake: run %s: %w", id, runs.ErrNotFound)
}

// fakeSilencer keeps the clicks the form hands on, and answers result.
type fakeSilencer struct {
	mu     sync.Mutex
	clicks []actions.Click
	result string
	err    error
}

func (f *fakeSilencer) take(c actions.Click) (actions.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clicks = append(f.clicks, c)
	return actions.Result{Result: f.result}, f.err
}

func (f *fakeSilencer) Silence(_ context.Context, c actions.Click) (actions.Result, error) {
	return f.take(c)
}

func (f *fakeSilencer) Unsilence(_ context.Context, c actions.Click) (actions.Result, error) {
	return f.take(c)
}

func (f *fakeSilencer) taken() []actions.Click {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]actions.Click(nil), f.clicks...)
}

// carol is the signed-in reader of the fixtures.
var carol = Reader{SignedIn: true, User: runs.User{ID: "web:basic", Name: "carol"}}

type pageFixture struct {
	srv      *httptest.Server
	runs     *fakeRuns
	silencer *fakeSilencer
	signer   *links.Signer
	reg      *prometheus.Registry
	pages    *Pages
	png      []byte
	mu       sync.Mutex
	reader   Reader
}

func (f *pageFixture) as(rd Reader) {
	f.mu.Lock()
	f.reader = rd
	f.mu.Unlock()
}

func (f *pageFixture) rd() Reader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reader
}

// newPageServer serves the pages as package handlers routes them, to carol
// (the fixture's as changes the reader), with artifact links signed, the
// profiler's events and the Silence form on.
func newPageServer(t *testing.T) *pageFixture {
	t.Helper()
	f := &pageFixture{runs: &fakeRuns{}, silencer: &fakeSilencer{result: "done"}, reg: prometheus.NewRegistry(), reader: carol,
		png: append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3}, 300)...)}
	f.runs.runs = append(f.runs.runs, &runs.Run{ID: "0197-older", Alertname: "VLLMHighTTFT", Status: vocab.StatusFailed},
		pageRunFixture(f.png))
	var err error
	if f.signer, err = links.NewSigner([]byte("runpage-test-key-0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	ev := runs.ProfileEvent{RunID: pageRun, Target: "http://10.0.0.7:8000", At: time.Date(2026, 5, 1, 10, 0, 30, 0, time.UTC), Actor: "replica-a", Event: "recording"}
	p, err := New(Options{Runs: f.runs, Log: zap.NewNop(), Registerer: f.reg,
		Profiles:  fakeProfile{p: runs.RunProfile{Events: []runs.ProfileEvent{ev}}},
		Artifacts: true, Signer: f.signer, Silencer: f.silencer})
	if err != nil {
		t.Fatal(err)
	}
	f.pages = p
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs", func(w http.ResponseWriter, r *http.Request) {
		q := runs.ListQuery{Alertname: r.URL.Query().Get("alertname"), Status: vocab.Status(r.URL.Query().Get("status")),
			Limit: 50, Cursor: r.URL.Query().Get("cursor")}
		if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil {
			q.Limit = l
		}
		p.List(w, r, f.rd(), q)
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) { p.Run(w, r, f.rd(), r.PathValue("id")) })
	mux.HandleFunc("POST /runs/{id}/silence", func(w http.ResponseWriter, r *http.Request) { p.Silence(w, r, f.rd(), r.PathValue("id")) })
	mux.HandleFunc("POST /runs/{id}/unsilence", func(w http.ResponseWriter, r *http.Request) { p.Unsilence(w, r, f.rd(), r.PathValue("id")) })
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// fetch GETs u with hdr.
func fetch(t *testing.T, u string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	return do(t, req)
}

// do sends req without following a redirect.
func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// post submits form to path.
func (f *pageFixture) post(t *testing.T, path string, form map[string]string) (*http.Response, []byte) {
	t.Helper()
	var vals []string
	for k, v := range form {
		vals = append(vals, k+"="+v)
	}
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(strings.Join(vals, "&")))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, req)
}
