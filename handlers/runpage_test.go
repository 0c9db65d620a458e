package handlers

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/config"
	hostilekit "github.com/autocapture/autocapture/internal/testkit/hostile"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// TestRunPagesAuth: both pages are held to the API's auth: 401 without or
// with wrong credentials, 200 with them; basic auth is what a browser can
// send; an unknown run is a 404 page.
func TestRunPagesAuth(t *testing.T) {
	h, _ := pageLinkHarness(t, config.Auth{BasicAuth: &config.BasicAuth{Username: "ops", Password: "s3cret"}})
	wrong, right := http.Header{}, http.Header{}
	wrong.Set("Authorization", basic("ops", "wrong"))
	right.Set("Authorization", basic("ops", "s3cret"))
	for _, p := range []string{"/runs", "/runs/" + linkRun, "/runs/nope"} {
		if rec := h.from("GET", p, "192.0.2.10:5000", nil); rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET %s without credentials: %d %q, want 401 with a Basic challenge", p, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
		if rec := h.from("GET", p, "192.0.2.10:5000", wrong); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong password: %d", p, rec.Code)
		}
	}
	if rec := h.from("GET", "/runs/"+linkRun, "192.0.2.10:5000", right); rec.Code != 200 || !strings.Contains(rec.Body.String(), "kv-pressure") {
		t.Fatalf("with credentials: %d", rec.Code)
	}
	if rec := h.from("GET", "/runs/nope", "192.0.2.10:5000", right); rec.Code != http.StatusNotFound || !isHTML(rec) ||
		!strings.Contains(rec.Body.String(), `no run &#34;nope&#34;`) {
		t.Fatalf("unknown run: %d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}

	tok, _ := pageLinkHarness(t, config.Auth{BearerToken: "page-token"})
	if rec := tok.from("GET", "/runs", "192.0.2.10:5000", nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("bearer-guarded list without a token: %d", rec.Code)
	}
	if rec := tok.from("GET", "/runs", "192.0.2.10:5000", http.Header{"Authorization": {"Bearer page-token"}}); rec.Code != 200 {
		t.Fatalf("bearer-guarded list with the token: %d", rec.Code)
	}
}

// TestRunsPageRefusesABadQuery: the list's query is read as the API's is:
// a status outside the list or a limit out of range is a 400 page, and the
// run service is not asked.
func TestRunsPageRefusesABadQuery(t *testing.T) {
	h := newHarness(t, nil)
	for _, q := range []string{"?status=bogus", "?limit=0", "?limit=501", "?limit=x"} {
		rec := h.do("GET", "/runs"+q, nil, nil)
		if rec.Code != http.StatusBadRequest || !isHTML(rec) {
			t.Errorf("GET /runs%s: %d %s, want a 400 page", q, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	if q := h.runs.lastList; q != (runs.ListQuery{}) {
		t.Errorf("the run service was asked %+v", q)
	}
	if rec := h.do("GET", "/runs?status=failed&limit=7", nil, nil); rec.Code != 200 {
		t.Fatalf("a good query: %d", rec.Code)
	}
	if q := h.runs.lastList; q.Status != "failed" || q.Limit != 7 {
		t.Errorf("query handed on: %+v", q)
	}
}

// TestListAPIHostileAlert: the runs API bounds every label and annotation
// of a run whose alert holds each hostile string; JSON escapes the rest.
func TestListAPIHostileAlert(t *testing.T) {
	for _, hc := range hostilekit.Cases() {
		t.Run(hc.Name, func(t *testing.T) {
			h := newHarness(t, nil)
			v := hc.Value
			h.runs.runs = append(h.runs.runs, &runs.Run{ID: "hostile", Status: vocab.StatusSucceeded, Alertname: v,
				Labels:      map[string]string{"alertname": v, "instance": v, "model_name": v, "job": v},
				Annotations: map[string]string{"summary": v, "description": v}})
			rec := h.do("GET", "/api/v1/runs?limit=50", nil, nil)
			var got struct {
				Runs []struct{ Labels, Annotations map[string]string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || len(got.Runs) != 1 {
				t.Fatalf("list API: %d %v", rec.Code, err)
			}
			for _, kv := range []map[string]string{got.Runs[0].Labels, got.Runs[0].Annotations} {
				for k, val := range kv {
					if len(val) > untrusted.MaxValue {
						t.Errorf("list API: %s of %d bytes", k, len(val))
					}
				}
			}
		})
	}
}

// basic is an Authorization header's value for user and password.
func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}
