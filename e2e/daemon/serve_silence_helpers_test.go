package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

const (
	silenceSecret = "silence-signing-secret"
	amNoReceivers = "route:\n  receiver: none\nreceivers:\n  - name: none\n"
)

var (
	alice = slackstub.Clicker{ID: "U0ALICE", Name: "alice"}
	bob   = slackstub.Clicker{ID: "U0BOB", Name: "bob"}
)

// silencePlaybook is one fast step, so the run's thread opens at once.
func silencePlaybook(alertname, target string) string {
	return fmt.Sprintf("playbooks:\n  - name: silence-%[2]s\n    match:\n      - alertname=\"%[2]s\"\n    steps:\n"+
		"      - id: fast\n        http: {url: \"%[1]s/fast\"}\n", target, alertname)
}

// silenceNotify is notify: with Slack's interactivity and the Silence action
// for alice alone.
func silenceNotify(stub *slackstub.Server) string {
	return slackNotify(stub) + "    signing_secret: " + silenceSecret + "\n" +
		"    actions:\n      silence:\n        enabled: true\n        users: [U0ALICE]\n"
}

// alertmanagerAt is the alertmanager: section for urls.
func alertmanagerAt(urls ...string) string {
	return fmt.Sprintf("alertmanager:\n  timeout: 2s\n  urls: [%s]\n", strings.Join(urls, ", "))
}

var clicks atomic.Int64

// click posts u's click, signed now, to the daemon's interactivity endpoint.
func click(t *testing.T, d *daemon, u slackstub.Clicker, messageTS, actionTS, actionID, value string) {
	t.Helper()
	body := slackstub.ClickAs(u, slackChannel, messageTS, actionTS, actionID, value)
	req, _ := http.NewRequest("POST", d.URL+"/hooks/slack/interactions", bytes.NewReader(body))
	// Each click is signed at its own second, as Slack's retry is: the
	// daemon refuses a signature it has seen.
	req.Header = slackstub.Signed(silenceSecret, time.Now().Add(-time.Duration(clicks.Add(1))*time.Second), body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("click %s by %s: %d %s", actionID, u.Name, resp.StatusCode, b)
	}
}

// amSilence is a silence as Alertmanager's API v2 lists it.
type amSilence struct {
	ID        string                 `json:"id"`
	Status    struct{ State string } `json:"status"`
	CreatedBy string                 `json:"createdBy"`
	Comment   string                 `json:"comment"`
	EndsAt    time.Time              `json:"endsAt"`
	Matchers  []struct {
		Name, Value string
		IsRegex     bool `json:"isRegex"`
	} `json:"matchers"`
}

// amSilences asks Alertmanager at base for its silences.
func amSilences(t *testing.T, base string) []amSilence {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/silences")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []amSilence
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// matchers renders a silence's matchers as name=value, sorted as listed.
func (s amSilence) matchers() map[string]string {
	m := map[string]string{}
	for _, x := range s.Matchers {
		m[x.Name] = x.Value
	}
	return m
}

// actionReplies are a thread's replies for actions, keyed by their key.
func actionReplies(m slackstub.Message) []slackstub.Message {
	var out []slackstub.Message
	for _, r := range m.Replies {
		if r.Metadata != nil && strings.HasPrefix(fmt.Sprint(r.Metadata.EventPayload["key"]), "action/") {
			out = append(out, r)
		}
	}
	return out
}

// buttonValue is the value of the button actionID in blocks, "" if none.
func buttonValue(blocks json.RawMessage, actionID string) string {
	var bs []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	_ = json.Unmarshal(blocks, &bs)
	for _, b := range bs {
		for _, e := range b.Elements {
			if e.ActionID == actionID {
				return e.Value
			}
		}
	}
	return ""
}

// hangingAM proxies to an Alertmanager; while hang is set, it creates a
// silence and then never answers, the window a kill -9 lands in; while down
// is set, it answers 503.
type hangingAM struct {
	hang    atomic.Bool
	down    atomic.Bool // answer 503, as an Alertmanager that is down behind a proxy
	created chan struct{}
	target  string
	srv     *httptest.Server
}

func newHangingAM(t *testing.T, target string) *hangingAM {
	h := &hangingAM{created: make(chan struct{}, 1), target: target}
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.down.Load() {
			http.Error(w, "upstream down", http.StatusServiceUnavailable)
			return
		}
		if !h.hang.Load() || r.Method != "POST" || r.URL.Path != "/api/v2/silences" {
			proxy.ServeHTTP(w, r)
			return
		}
		resp, err := http.Post(target+r.URL.Path, "application/json", r.Body)
		if err == nil {
			resp.Body.Close()
			h.created <- struct{}{}
		}
		<-r.Context().Done() // the caller is killed mid-call
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// silenceRig is a daemon with the Silence action for alice, the stand-in
// and a target, its Alertmanager at amURLs.
type silenceRig struct {
	d    *daemon
	o    *daemonOpts
	stub *slackstub.Server
	// starts is when the alerts it fires started (a resolution repeats it).
	starts time.Time
}

// newSilenceRig starts one; postgres puts its store on PostgreSQL.
func newSilenceRig(t *testing.T, alertname string, postgres bool, amURLs ...string) *silenceRig {
	t.Helper()
	stub := newSlack(t)
	target := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	t.Cleanup(target.Close)
	o := &daemonOpts{Token: "s", Playbooks: silencePlaybook(alertname, target.URL), Notify: silenceNotify(stub),
		More: alertmanagerAt(amURLs...), LeaseTimeout: killLease}
	if postgres {
		o.DatabaseURL = testenv.StartPostgres(t)
	}
	return &silenceRig{d: startDaemon(t, o), o: o, stub: stub, starts: time.Now().Add(-time.Minute)}
}

// fire posts alertname's alert with fingerprint fp and waits for its run's
// parent: the run id and the parent.
func (r *silenceRig) fire(t *testing.T, alertname, fp string) (string, slackstub.Message) {
	t.Helper()
	return fireAndWait(t, r.d, r.stub, webhookBody(alertname, fp, "firing", r.starts))
}

// fireAndWait posts the webhook body to d and waits for its run's parent in
// the stand-in: the run id and the parent.
func fireAndWait(t *testing.T, d *daemon, stub *slackstub.Server, body []byte) (string, slackstub.Message) {
	t.Helper()
	code, b := d.post(t, body)
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	var parent slackstub.Message
	waitFor(t, 30*time.Second, "the run's parent", func() bool {
		for _, m := range stub.Messages(slackChannel) {
			if m.Metadata != nil && m.Metadata.EventPayload["run_id"] == id {
				parent = m
				return true
			}
		}
		return false
	})
	return id, parent
}
