package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/silences"
)

// fakeAM is an Alertmanager that keeps what it is asked: each silence
// Ensure makes (it finds none), each expiry.
type fakeAM struct {
	mu      sync.Mutex
	made    []silences.Silence
	expired []string
}

func (a *fakeAM) Ensure(_ context.Context, s silences.Silence) (string, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.made = append(a.made, s)
	return "sil-" + string(rune('0'+len(a.made))), true, nil
}

func (a *fakeAM) Expire(_ context.Context, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expired = append(a.expired, id)
	return nil
}

func (a *fakeAM) counts() (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.made), len(a.expired)
}

var formField = regexp.MustCompile(`name="(interaction|silence)" value="([^"]+)"`)

// TestRunPageSilenceThroughTheRunService: through the real run service on
// SQLite and its actions, carol (signed in with basic auth) silences the
// run's alert from its page: one silence, made in her name, whether she
// submits the form twice or submits another rendering of it; the page then
// shows it and Unsilence expires it. A page link's reader, a POST from
// another site and a reader who did not sign in change nothing.
func TestRunPageSilenceThroughTheRunService(t *testing.T) {
	ctx := context.Background()
	am := &fakeAM{}
	reg := prometheus.NewRegistry()
	svc, err := runner.Open(ctx, runner.Options{Config: config.Default().Runs, SQLitePath: filepath.Join(t.TempDir(), "a.db"),
		Planner: noPlans{}, Log: zap.NewNop(), Registerer: reg, Actions: &runner.ActionsOptions{Silencer: am, Timeout: time.Second, URLs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	acc, err := svc.Accept(ctx, []template.Alert{{Status: "firing", Fingerprint: "fp1", StartsAt: time.Now().Add(-10 * time.Minute),
		Labels: template.KV{"alertname": "VLLMHighTTFT", "instance": "10.0.0.7:8000"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := acc[0].RunID
	// What a silence matches is chosen with the run's plans: let it run (no
	// playbook matches, so it ends at once) before the form is used.
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		r, err := svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Finished() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after a minute", id, r.Status)
		}
	}
	signer, err := links.NewSigner([]byte("page-silence-test-key-0123456789ab"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{reg: reg}
	h.srv, err = New(Options{Runs: svc, Feedback: svc, Registry: reg, Log: zap.NewNop(),
		Auth:               config.Auth{BasicAuth: &config.BasicAuth{Username: "carol", Password: "pw"}},
		SlackSigningSecret: signingSecret, SlackActions: &SlackActions{Actions: svc.Actions()}, PageLinks: signer})
	if err != nil {
		t.Fatal(err)
	}
	carol := http.Header{"Authorization": {basic("carol", "pw")}}
	page := func() (string, map[string]string) {
		t.Helper()
		rec := h.from("GET", "/runs/"+id, "192.0.2.10:5000", carol)
		fields := map[string]string{}
		for _, m := range formField.FindAllStringSubmatch(rec.Body.String(), -1) {
			fields[m[1]] = m[2]
		}
		return rec.Body.String(), fields
	}
	submit := func(path string, form url.Values, hdr http.Header) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
		req.RemoteAddr = "192.0.2.10:5000"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		for k, v := range hdr {
			req.Header[k] = v
		}
		return serve(h, req)
	}

	body, fields := page()
	if !strings.Contains(body, `id="silence-form"`) || fields["interaction"] == "" {
		t.Fatalf("carol's page has no Silence form:\n%s", body)
	}
	form := url.Values{"choice": {"1h"}, "interaction": {fields["interaction"]}}

	// A page link's token, another site, no sign-in: refused, nothing made.
	tok := signer.SignPage(id, time.Now().Add(time.Hour))
	if rec := submit("/runs/"+id+"/silence?"+tok.Encode(), form, nil); rec.Code != http.StatusForbidden || !isHTML(rec) ||
		!strings.Contains(rec.Body.String(), "A page link cannot silence") {
		t.Errorf("a POST with only a page link's token: %d\n%s", rec.Code, rec.Body)
	}
	withTok := url.Values{"choice": {"1h"}, "interaction": {fields["interaction"]}, links.ParamExpires: tok[links.ParamExpires], links.ParamSignature: tok[links.ParamSignature]}
	if rec := submit("/runs/"+id+"/silence", withTok, nil); rec.Code != http.StatusForbidden {
		t.Errorf("a POST with a page link's token in its form: %d", rec.Code)
	}
	if rec := submit("/runs/"+id+"/silence", form, http.Header{"Authorization": carol["Authorization"], "Sec-Fetch-Site": {"cross-site"}}); rec.Code != http.StatusForbidden ||
		!strings.Contains(rec.Body.String(), "cross_origin") {
		t.Errorf("a cross-site POST with carol's credentials: %d %s", rec.Code, rec.Body)
	}
	if rec := submit("/runs/"+id+"/silence", form, nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("a POST without sign-in: %d", rec.Code)
	}
	if made, _ := am.counts(); made != 0 {
		t.Fatalf("%d silences made by refused POSTs", made)
	}
	if rec := h.from("GET", "/runs/"+id+"?"+tok.Encode(), "192.0.2.10:5000", nil); rec.Code != 200 || strings.Contains(rec.Body.String(), `id="silence"`) {
		t.Errorf("a link reader's page: %d, with the Silence section: %v", rec.Code, strings.Contains(rec.Body.String(), `id="silence"`))
	}

	// carol submits, submits again, and submits another rendering.
	for i, want := range []string{"silence/done", "silence/already"} {
		rec := submit("/runs/"+id+"/silence", form, carol)
		if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), url.QueryEscape(want)) {
			t.Fatalf("submission %d: %d %s, want 303 with %s", i+1, rec.Code, rec.Header().Get("Location"), want)
		}
	}
	_, again := page()
	if rec := submit("/runs/"+id+"/silence", url.Values{"choice": {"24h"}, "interaction": {again["interaction"]}}, carol); rec.Code != http.StatusSeeOther {
		t.Fatalf("another rendering's submission: %d", rec.Code)
	}
	if made, _ := am.counts(); made != 1 || !strings.Contains(am.made[0].CreatedBy, "carol") || !strings.Contains(am.made[0].CreatedBy, "web:basic") {
		t.Fatalf("silences made %+v, want one by carol (web:basic)", am.made)
	}
	run, err := svc.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Actions) != 1 || run.Actions[0].User.Name != "carol" || !run.Actions[0].Live {
		t.Fatalf("the run keeps %+v, want carol's live silence", run.Actions)
	}
	body, fields = page()
	if !strings.Contains(body, `id="silenced"`) || !strings.Contains(body, "sil-1") || fields["silence"] != run.Actions[0].ID {
		t.Fatalf("the page does not show the silence with Unsilence:\n%s", body)
	}
	rec := submit("/runs/"+id+"/unsilence", url.Values{"silence": {fields["silence"]}, "interaction": {fields["interaction"]}}, carol)
	if _, expired := am.counts(); rec.Code != http.StatusSeeOther || expired != 1 || am.expired[0] != "sil-1" {
		t.Fatalf("Unsilence: %d, expired %v", rec.Code, am.expired)
	}
	if body, _ := page(); strings.Contains(body, `id="silenced"`) || !strings.Contains(body, `id="silence-form"`) {
		t.Errorf("after Unsilence the page still shows the silence, or no form")
	}
}
