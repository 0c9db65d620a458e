package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// alertJSON is one alert as Alertmanager sends it.
func alertJSON(name, fp, status string) string {
	return fmt.Sprintf(`{"status":%q,"labels":{"alertname":%q,"instance":"127.0.0.1:8000"},"annotations":{},`+
		`"startsAt":"2026-03-01T10:00:00Z","endsAt":"0001-01-01T00:00:00Z","generatorURL":"","fingerprint":%q}`, status, name, fp)
}

// body wraps alerts into a version-4 webhook body.
func body(alerts ...string) []byte {
	return []byte(`{"receiver":"autocapture","status":"firing","alerts":[` + strings.Join(alerts, ",") +
		`],"groupLabels":{},"commonLabels":{},"commonAnnotations":{},"externalURL":"http://127.0.0.1:9093",` +
		`"version":"4","groupKey":"{}:{}","truncatedAlerts":0}`)
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// withType sets h's Content-Type; "" sends the header empty, as no type.
func withType(h http.Header, ct string) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	out["Content-Type"] = []string{ct}
	return out
}

func TestWebhookAnswers(t *testing.T) {
	good := alertJSON("VLLMHighTTFT", "aaaaaaaaaaaaaaaa", "firing")
	good2 := alertJSON("VLLMQueueDeep", "bbbbbbbbbbbbbbbb", "firing")
	huge := body(alertJSON("Big", "cccccccccccccccc", "firing")[:10] + strings.Repeat(" ", 2<<20) + `}`)
	tests := []struct {
		name     string
		body     []byte
		header   http.Header
		chunked  bool // send without Content-Length
		storeErr error
		code     int
		errWord  string   // the error body's machine word
		outcomes []string // per alert, for 200
	}{
		{name: "one good alert", body: body(good), header: bearer("s3cret"), code: 200, outcomes: []string{"accepted"}},
		{name: "not JSON", body: []byte("alertname=x"), header: bearer("s3cret"), code: 400, errWord: CodeNotJSON},
		{name: "JSON array instead of object", body: []byte(`[1,2]`), header: bearer("s3cret"), code: 400, errWord: CodeNotJSON},
		{name: "alerts of the wrong type", body: []byte(`{"version":"4","alerts":"many"}`), header: bearer("s3cret"), code: 400, errWord: CodeNoAlerts},
		{name: "no alerts field", body: []byte(`{"version":"4"}`), header: bearer("s3cret"), code: 400, errWord: CodeNoAlerts},
		{name: "empty alerts", body: body(), header: bearer("s3cret"), code: 400, errWord: CodeNoAlerts},
		{name: "version of the wrong type", body: []byte(`{"version":4,"alerts":[` + good + `]}`), header: bearer("s3cret"), code: 400, errWord: CodeBadVersion},
		{name: "unknown version", body: []byte(`{"version":"5","alerts":[` + good + `]}`), header: bearer("s3cret"), code: 400, errWord: CodeBadVersion},
		{name: "no version", body: []byte(`{"alerts":[` + good + `]}`), header: bearer("s3cret"), code: 400, errWord: CodeBadVersion},
		{name: "one bad alert among good ones", header: bearer("s3cret"), code: 200,
			body:     body(good, `{"status":"firing","labels":{"alertname":"X"},"startsAt":"nope"}`, good2),
			outcomes: []string{"accepted", "rejected", "accepted"}},
		{name: "alert with labels of the wrong type", header: bearer("s3cret"), code: 200,
			body: body(`{"status":"firing","labels":7}`, good), outcomes: []string{"rejected", "accepted"}},
		{name: "every alert bad is still 200", header: bearer("s3cret"), code: 200,
			body: body(alertJSON("X", "dddddddddddddddd", "pending")), outcomes: []string{"rejected"}},
		{name: "envelope field of the wrong type is ignored", header: bearer("s3cret"), code: 200,
			body: []byte(`{"version":"4","groupLabels":[1],"truncatedAlerts":"x","alerts":[` + good + `]}`), outcomes: []string{"accepted"}},
		{name: "2 MiB body with Content-Length", body: huge, header: bearer("s3cret"), code: 413, errWord: "body_too_large"},
		{name: "2 MiB body chunked", body: huge, header: bearer("s3cret"), chunked: true, code: 413, errWord: "body_too_large"},
		{name: "absent token", body: body(good), code: 401, errWord: "unauthorized"},
		{name: "wrong token", body: body(good), header: bearer("s3cre"), code: 401, errWord: "unauthorized"},
		{name: "token as basic auth", body: body(good), header: http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("a:s3cret"))}}, code: 401, errWord: "unauthorized"},
		{name: "bare token without scheme", body: body(good), header: http.Header{"Authorization": {"s3cret"}}, code: 401, errWord: "unauthorized"},
		{name: "JSON with a charset", body: body(good), header: withType(bearer("s3cret"), "application/json; charset=utf-8"), code: 200, outcomes: []string{"accepted"}},
		{name: "JSON type in capitals", body: body(good), header: withType(bearer("s3cret"), "Application/JSON"), code: 200, outcomes: []string{"accepted"}},
		{name: "text/plain, a browser's simple request", body: body(good), header: withType(bearer("s3cret"), "text/plain"), code: 415, errWord: CodeNotJSONType},
		{name: "form-encoded", body: body(good), header: withType(bearer("s3cret"), "application/x-www-form-urlencoded"), code: 415, errWord: CodeNotJSONType},
		{name: "multipart", body: body(good), header: withType(bearer("s3cret"), "multipart/form-data; boundary=x"), code: 415, errWord: CodeNotJSONType},
		{name: "no Content-Type", body: body(good), header: withType(bearer("s3cret"), ""), code: 415, errWord: CodeNotJSONType},
		{name: "JSON-looking subtype", body: body(good), header: withType(bearer("s3cret"), "application/jsonx"), code: 415, errWord: CodeNotJSONType},
		{name: "wrong type without a token is 401 first", body: body(good), header: withType(nil, "text/plain"), code: 401, errWord: "unauthorized"},
		{name: "store down", body: body(good), header: bearer("s3cret"), storeErr: errors.New("database is locked"), code: 503, errWord: "store_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withToken("s3cret"))
			h.runs.setErr(tt.storeErr)
			req := newRequest(t, tt.body, tt.header, tt.chunked)
			rec := serve(h, req)
			if rec.Code != tt.code {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			if tt.code == http.StatusUnsupportedMediaType && h.runs.calls != 0 {
				t.Errorf("a body not declared as JSON reached the run store (%d calls)", h.runs.calls)
			}
			if tt.code != 200 {
				checkErrorBody(t, rec.Body.Bytes(), tt.errWord)
			} else {
				checkOutcomes(t, rec.Body.Bytes(), tt.outcomes)
			}
			if got := testutil.ToFloat64(h.srv.metrics.webhooks.WithLabelValues(fmt.Sprint(tt.code))); got != 1 {
				t.Errorf("autocapture_webhooks_total{code=%d} = %v, want 1", tt.code, got)
			}
			// The daemon keeps serving: a good webhook right after is accepted.
			h.runs.setErr(nil)
			if rec := h.do("POST", "/hooks/alertmanager", body(alertJSON("After", "eeeeeeeeeeeeeeee", "firing")), bearer("s3cret")); rec.Code != 200 {
				t.Fatalf("follow-up webhook: code %d, body %s", rec.Code, rec.Body)
			}
		})
	}
}

func checkErrorBody(t *testing.T, b []byte, word string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, b)
	}
	if e.Status != "error" || e.Error != word || e.Reason == "" || strings.Contains(e.Reason, "\n") {
		t.Fatalf("error body = %+v, want error %q with a one-line reason", e, word)
	}
}

func checkOutcomes(t *testing.T, b []byte, want []string) {
	t.Helper()
	var resp WebhookResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("200 body is not JSON: %v: %s", err, b)
	}
	if len(resp.Alerts) != len(want) {
		t.Fatalf("got %d alert results, want %d: %s", len(resp.Alerts), len(want), b)
	}
	for i, r := range resp.Alerts {
		if r.Index != i || string(r.Outcome) != want[i] {
			t.Errorf("alert %d: index %d outcome %q, want %q", i, r.Index, r.Outcome, want[i])
		}
		if r.Outcome == OutcomeRejected && (r.Reason == "" || r.Detail == "") {
			t.Errorf("alert %d rejected without reason/detail: %+v", i, r)
		}
		if r.Outcome == runs.OutcomeAccepted && (r.RunID == "" || r.Fingerprint == "") {
			t.Errorf("alert %d accepted without run id/fingerprint: %+v", i, r)
		}
	}
}

func TestWebhookCountsOutcomesAndRejections(t *testing.T) {
	h := newHarness(t, nil)
	a := alertJSON("A", "1111111111111111", "firing")
	steps := [][]byte{
		body(a, alertJSON("B", "2222222222222222", "firing")),
		body(a), // the same firing again
		body(alertJSON("A", "1111111111111111", "resolved")),
		body(alertJSON("C", "3333333333333333", "resolved")),
		body(`{"status":"firing","labels":{"alertname":"D"}}`, `{"status":"firing","labels":{},"startsAt":"2026-03-01T10:00:00Z"}`),
	}
	for i, b := range steps {
		if rec := h.do("POST", "/hooks/alertmanager", b, nil); rec.Code != 200 {
			t.Fatalf("step %d: code %d: %s", i, rec.Code, rec.Body)
		}
	}
	want := map[string]float64{"accepted": 2, "deduplicated": 1, "resolved": 1, "resolved_unknown": 1, "rejected": 2}
	for o, n := range want {
		if got := testutil.ToFloat64(h.srv.metrics.alerts.WithLabelValues(o)); got != n {
			t.Errorf("autocapture_alerts_total{outcome=%q} = %v, want %v", o, got, n)
		}
	}
	for r, n := range map[string]float64{ReasonMissingStartsAt: 1, ReasonMissingAlertname: 1, ReasonBadStatus: 0} {
		if got := testutil.ToFloat64(h.srv.metrics.rejected.WithLabelValues(r)); got != n {
			t.Errorf("autocapture_alerts_rejected_total{reason=%q} = %v, want %v", r, got, n)
		}
	}
	if n := h.logs.FilterMessage("Alert rejected.").Len(); n != 2 {
		t.Errorf("logged %d rejections, want 2", n)
	}
}

func TestWebhookBasicAuth(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Auth = config.Auth{BasicAuth: &config.BasicAuth{Username: "am", Password: "hunter2-xyz"}}
	})
	basic := func(u, p string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))}}
	}
	tests := []struct {
		name   string
		header http.Header
		code   int
	}{
		{"right credentials", basic("am", "hunter2-xyz"), 200},
		{"wrong password", basic("am", "hunter2-xy"), 401},
		{"wrong user", basic("root", "hunter2-xyz"), 401},
		{"bearer when only basic is configured", bearer("hunter2-xyz"), 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do("POST", "/hooks/alertmanager", body(alertJSON("A", "", "firing")), tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if tt.code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	for _, e := range h.logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()), "hunter2") {
			t.Errorf("a log line carries the password: %v", e.ContextMap())
		}
	}
}

func newRequest(t *testing.T, b []byte, header http.Header, chunked bool) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", "http://daemon/hooks/alertmanager", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json") // Alertmanager's; a test's header replaces it
	for k, v := range header {
		req.Header[k] = v
	}
	if chunked {
		req.ContentLength = -1
	}
	return req
}

// TestLoggedRemoteIsThePeer: a client cannot put another address into the logs
// with X-Forwarded-For (it would hide who is guessing tokens).
func TestLoggedRemoteIsThePeer(t *testing.T) {
	h := newHarness(t, withToken("s3cret"))
	rec := h.do("POST", "/hooks/alertmanager", []byte(`{}`), http.Header{"X-Forwarded-For": {"203.0.113.9"}})
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("code %d", rec.Code)
	}
	entries := h.logs.FilterField(zap.String("remote", "192.0.2.1")).All() // httptest's peer address
	if len(entries) == 0 || len(h.logs.FilterField(zap.String("remote", "203.0.113.9")).All()) != 0 {
		t.Fatalf("remote not the peer's: %v", h.logs.All())
	}
}

// TestAuthWithNothingToCompareDeniesAll: auth that is configured but holds no
// usable credential (a token file never read or read empty, basic auth without
// a password) refuses every request, the empty ones included; config refuses
// such a file at load, this is the second line. Before, an empty token made the
// authenticator "off" and everything went through.
func TestAuthWithNothingToCompareDeniesAll(t *testing.T) {
	basic := func(u, p string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))}}
	}
	cases := []struct {
		name string
		auth config.Auth
	}{
		{"token file read empty", config.Auth{BearerTokenFile: "/run/secrets/empty"}},
		{"whitespace token", config.Auth{BearerToken: " \n"}},
		{"basic auth without password", config.Auth{BasicAuth: &config.BasicAuth{Username: "am"}}},
		{"basic auth without user or password", config.Auth{BasicAuth: &config.BasicAuth{}}},
	}
	requests := map[string]http.Header{
		"no header":            nil,
		"empty bearer":         {"Authorization": {"Bearer "}},
		"whitespace bearer":    {"Authorization": {"Bearer  \t"}},
		"user, no password":    basic("am", ""),
		"no user, no password": basic("", ""),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.Auth = c.auth })
			for rname, hdr := range requests {
				if rec := h.do("POST", "/hooks/alertmanager", body(alertJSON("A", "", "firing")), hdr); rec.Code != 401 {
					t.Errorf("%s: webhook code %d, want 401", rname, rec.Code)
				}
				if rec := h.do("GET", "/api/v1/runs", nil, hdr); rec.Code != 401 {
					t.Errorf("%s: runs API code %d, want 401", rname, rec.Code)
				}
			}
		})
	}
}

// TestStateChangesRefuseCrossOriginBrowsers: with no token (loopback's
// default) a page in the user's browser must not reach the routes that
// change state, whatever body type it picks; clients that are not browsers
// send no Origin or Sec-Fetch-Site and pass.
func TestStateChangesRefuseCrossOriginBrowsers(t *testing.T) {
	h := newHarness(t, nil)
	run := &runs.Run{ID: "r1", Status: vocab.StatusRunning}
	h.runs.runs = append(h.runs.runs, run)
	cases := []struct {
		name   string
		method string
		path   string
		header http.Header
		code   int
	}{
		{"webhook from another site", "POST", "/hooks/alertmanager", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"cancel from another site", "POST", "/api/v1/runs/r1/cancel", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"cancel from an old browser's other origin", "POST", "/api/v1/runs/r1/cancel", http.Header{"Origin": {"http://evil.example"}}, 403},
		{"reload from a sibling site", "POST", "/-/reload", http.Header{"Sec-Fetch-Site": {"same-site"}}, 403},
		{"reload by PUT from another site", "PUT", "/-/reload", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"cancel from the daemon's own origin", "POST", "/api/v1/runs/r1/cancel", http.Header{"Sec-Fetch-Site": {"same-origin"}}, 200},
		{"reading the list from another site", "GET", "/api/v1/runs", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 200},
		{"webhook from Alertmanager", "POST", "/hooks/alertmanager", nil, 200},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var b []byte
			if tt.path == "/hooks/alertmanager" {
				b = body(alertJSON("A", "1111111111111111", "firing"))
			}
			before := h.runs.calls
			rec := h.do(tt.method, tt.path, b, tt.header)
			if rec.Code != tt.code {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			if tt.code == 403 {
				checkErrorBody(t, rec.Body.Bytes(), "cross_origin")
				if h.runs.calls != before || run.Status != vocab.StatusRunning {
					t.Errorf("a refused request reached the run store (run %s)", run.Status)
				}
			}
		})
	}
}
