package runpage

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/html"

	"github.com/autocapture/autocapture/internal/testkit/htmldoc"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/runs"
)

// silenceForm reads the Silence form of run id's page as reader rd sees
// it: its hidden fields and its buttons' choices; nil when there is none.
func silenceForm(t *testing.T, f *pageFixture, id string) (form *html.Node, fields map[string]string, choices []string) {
	t.Helper()
	res, body := fetch(t, f.srv.URL+"/runs/"+id, nil)
	if res.StatusCode != 200 {
		t.Fatalf("GET the page: %d\n%s", res.StatusCode, body)
	}
	doc := htmldoc.Parse(t, body)
	if form = htmldoc.ByID(doc, "silence-form"); form == nil {
		form = htmldoc.ByID(doc, "unsilence-form")
	}
	if form == nil {
		return nil, nil, nil
	}
	fields = map[string]string{}
	for _, in := range htmldoc.Elements(form, "input") {
		fields[htmldoc.Attr(in, "name")] = htmldoc.Attr(in, "value")
	}
	for _, b := range htmldoc.Elements(form, "button") {
		choices = append(choices, htmldoc.Attr(b, "value"))
	}
	return form, fields, choices
}

// TestSilenceFormForASignedInReader: a signed-in reader's page offers 1 h,
// 4 h, 24 h and until resolved, posting to the run's silence route; the
// submission reaches the actions as the reader's click, keyed by the
// form's interaction id, and answers with the page (303) and what came of
// it. Submitted twice, the form hands on the same interaction (one action,
// as a Slack retry is); each page rendered carries its own.
func TestSilenceFormForASignedInReader(t *testing.T) {
	f := newPageServer(t)
	form, fields, choices := silenceForm(t, f, pageRun)
	if form == nil {
		t.Fatal("no Silence form for a signed-in reader")
	}
	if got := strings.Join(choices, ","); got != "1h,4h,24h,resolved" {
		t.Errorf("choices %s, want 1h,4h,24h,resolved", got)
	}
	action := htmldoc.Resolve(t, f.srv.URL+"/runs/"+pageRun, htmldoc.Attr(form, "action"))
	if action != f.srv.URL+"/runs/"+pageRun+"/silence" || htmldoc.Attr(form, "method") != "post" {
		t.Fatalf("the form posts %s to %s", htmldoc.Attr(form, "method"), action)
	}
	nonce := fields["interaction"]
	if !interactionID.MatchString(nonce) {
		t.Fatalf("interaction %q", nonce)
	}
	for range 2 {
		res, body := f.post(t, "/runs/"+pageRun+"/silence", map[string]string{"choice": "4h", "interaction": nonce})
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST: %d\n%s", res.StatusCode, body)
		}
		if loc := htmldoc.Resolve(t, f.srv.URL+"/runs/"+pageRun+"/silence", res.Header.Get("Location")); loc != f.srv.URL+"/runs/"+pageRun+"?result=silence%2Fdone#silence" {
			t.Fatalf("answered with %s, want the run's page", loc)
		}
	}
	want := actions.Click{RunID: pageRun, Choice: "4h", Interaction: "web/" + nonce, UserID: "web:basic", UserName: "carol"}
	if got := f.silencer.taken(); len(got) != 2 || got[0] != want || got[1] != want {
		t.Fatalf("clicks %+v, want twice %+v", got, want)
	}
	if _, again, _ := silenceForm(t, f, pageRun); again["interaction"] == nonce {
		t.Errorf("a second rendering reuses the interaction id %s", nonce)
	}
	res, body := fetch(t, f.srv.URL+"/runs/"+pageRun+"?result=silence%2Fdone", nil)
	if n := htmldoc.Text(htmldoc.ByID(htmldoc.Parse(t, body), "silence-notice")); res.StatusCode != 200 || !strings.Contains(n, "Silenced") {
		t.Errorf("the page after the submission says %q", n)
	}
	_, body = fetch(t, f.srv.URL+"/runs/"+pageRun+"?result=<b>forged</b>", nil)
	if htmldoc.ByID(htmldoc.Parse(t, body), "silence-notice") != nil {
		t.Errorf("a result the form never answers is shown")
	}
	if v := testutil.ToFloat64(f.pages.actions.WithLabelValues("silence", "done")); v != 2 {
		t.Errorf("counted %v done, want 2", v)
	}
}

// TestLinkReaderCannotSilence: a reader who came with a page link sees the
// page without the form, and a submission in their name is refused with a
// page saying why; nothing reaches the actions.
func TestLinkReaderCannotSilence(t *testing.T) {
	f := newPageServer(t)
	f.as(Reader{})
	if form, _, _ := silenceForm(t, f, pageRun); form != nil {
		t.Fatal("a link reader is offered the Silence form")
	}
	res, body := f.post(t, "/runs/"+pageRun+"/silence", map[string]string{"choice": "1h", "interaction": strings.Repeat("a", 32)})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "signed-in") {
		t.Fatalf("a link reader's POST: %d\n%s", res.StatusCode, body)
	}
	if got := f.silencer.taken(); len(got) != 0 {
		t.Fatalf("clicks %+v, want none", got)
	}
	if v := testutil.ToFloat64(f.pages.actions.WithLabelValues("silence", "refused")); v != 1 {
		t.Errorf("counted %v refused, want 1", v)
	}
}

// TestSilenceFormRefusesBadInput: a form without a valid interaction id, a
// choice the page does not offer, or an Unsilence of a silence this run
// did not make is a 400 or 404 page; nothing reaches the actions.
func TestSilenceFormRefusesBadInput(t *testing.T) {
	f := newPageServer(t)
	nonce := strings.Repeat("b", 32)
	for _, c := range []struct {
		path string
		form map[string]string
		code int
	}{
		{"/runs/" + pageRun + "/silence", map[string]string{"choice": "1h"}, 400},
		{"/runs/" + pageRun + "/silence", map[string]string{"choice": "1h", "interaction": "../x"}, 400},
		{"/runs/" + pageRun + "/silence", map[string]string{"choice": "2h", "interaction": nonce}, 400},
		{"/runs/" + pageRun + "/unsilence", map[string]string{"silence": "silence/other/x", "interaction": nonce}, 404},
		{"/runs/nope/unsilence", map[string]string{"silence": "silence/nope/x", "interaction": nonce}, 404},
	} {
		res, body := f.post(t, c.path, c.form)
		if res.StatusCode != c.code || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Errorf("POST %s %v: %d %s, want a %d page\n%s", c.path, c.form, res.StatusCode, res.Header.Get("Content-Type"), c.code, body)
		}
	}
	if got := f.silencer.taken(); len(got) != 0 {
		t.Fatalf("clicks %+v, want none", got)
	}
	f.silencer.err = errors.New("database is locked")
	if res, body := f.post(t, "/runs/"+pageRun+"/silence", map[string]string{"choice": "1h", "interaction": nonce}); res.StatusCode != http.StatusServiceUnavailable ||
		!strings.Contains(string(body), "nothing was done") {
		t.Errorf("a store failure: %d\n%s", res.StatusCode, body)
	}
}

// TestSilenceShownWhileItHolds: the run's live silence is on its page:
// who, for how long, until when, its id, and an Unsilence form naming the
// silencing action; submitted, it reaches the actions as an Unsilence of
// that action.
func TestSilenceShownWhileItHolds(t *testing.T) {
	f := newPageServer(t)
	ends := time.Date(2026, 5, 1, 14, 0, 0, 0, time.UTC)
	r := f.runs.runs[1]
	r.Actions = []runs.Action{{ID: "silence/" + pageRun + "/web/x", Kind: actions.KindSilence, Arg: "4h", State: "done",
		User: runs.User{ID: "web:proxy", Name: "dave@example.com"}, SilenceID: "5e1e-7c3", EndsAt: &ends, Live: true, At: ends.Add(-4 * time.Hour)}}
	form, fields, _ := silenceForm(t, f, pageRun)
	if form == nil || htmldoc.Attr(form, "id") != "unsilence-form" || fields["silence"] != r.Actions[0].ID {
		t.Fatalf("the page's form %v %v: want Unsilence of %s", form, fields, r.Actions[0].ID)
	}
	_, body := fetch(t, f.srv.URL+"/runs/"+pageRun, nil)
	doc := htmldoc.Parse(t, body)
	if s := htmldoc.Text(htmldoc.ByID(doc, "silenced")); !strings.Contains(s, "dave@example.com") || !strings.Contains(s, "web:proxy") ||
		!strings.Contains(s, "for 4h, until 2026-05-01 14:00:00 UTC") || !strings.Contains(s, "5e1e-7c3") {
		t.Errorf("the silence reads %q", s)
	}
	if a := htmldoc.Text(htmldoc.ByID(doc, "actions")); !strings.Contains(a, "dave@example.com") || !strings.Contains(a, "silence 4h 5e1e-7c3") {
		t.Errorf("the actions table reads %q", a)
	}
	res, _ := f.post(t, "/runs/"+pageRun+"/unsilence", fields)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("Unsilence: %d", res.StatusCode)
	}
	if got := f.silencer.taken(); len(got) != 1 || got[0].SilenceAction != r.Actions[0].ID || got[0].UserName != "carol" {
		t.Fatalf("clicks %+v, want carol's Unsilence of %s", got, r.Actions[0].ID)
	}
}
