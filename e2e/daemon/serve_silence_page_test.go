package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/chromedp/chromedp"
)

var pageInteraction = regexp.MustCompile(`name="interaction" value="([0-9a-f]{32})"`)

// TestServeSilenceFromRunPage: through the real binary and a real
// Alertmanager, carol, signed in to the run page with basic auth, submits
// its Silence form twice: Alertmanager lists exactly one silence, with the
// alert's matchers and carol's name; the stand-in's thread gets the same
// reply a Slack click gets, once; the page shows the silence.
func TestServeSilenceFromRunPage(t *testing.T) {
	t.Parallel()
	am := testenv.StartAlertmanager(t, amNoReceivers)
	stub := newSlack(t)
	target := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	t.Cleanup(target.Close)
	o := &daemonOpts{Token: "s", BasicAuth: "{username: carol, password: carol-pw}", Playbooks: silencePlaybook("E2EPageSilence", target.URL),
		Notify: silenceNotify(stub), More: alertmanagerAt(am.URL), LeaseTimeout: killLease}
	rig := &silenceRig{d: startDaemon(t, o), o: o, stub: stub, starts: time.Now().Add(-time.Minute)}
	d := rig.d
	id, _ := rig.fire(t, "E2EPageSilence", "5113ce0000000101")

	get, _ := http.NewRequest("GET", d.URL+"/runs/"+id, nil)
	get.SetBasicAuth("carol", "carol-pw")
	code, page := d.do(t, get)
	m := pageInteraction.FindSubmatch(page)
	if code != 200 || m == nil {
		t.Fatalf("carol's run page: %d, without the Silence form\n%s", code, page)
	}
	form := url.Values{"choice": {"4h"}, "interaction": {string(m[1])}}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i := range 2 { // the double submit
		req, _ := http.NewRequest("POST", d.URL+"/runs/"+id+"/silence", strings.NewReader(form.Encode()))
		req.SetBasicAuth("carol", "carol-pw")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", d.URL) // as a browser posts a form of the page's own origin
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("submission %d: %d %s", i+1, resp.StatusCode, b)
		}
	}

	var sil amSilence
	waitFor(t, 30*time.Second, "the silence in Alertmanager", func() bool {
		got := amSilences(t, am.URL)
		if len(got) == 1 {
			sil = got[0]
		}
		return len(got) == 1 && sil.Status.State == "active"
	})
	if m := sil.matchers(); m["alertname"] != "E2EPageSilence" || m["instance"] != "127.0.0.1:1" {
		t.Errorf("silence matchers %v, want the alert's alertname and instance", m)
	}
	if !strings.Contains(sil.CreatedBy, "carol") || !strings.Contains(sil.CreatedBy, "web:basic") || !strings.Contains(sil.Comment, id) {
		t.Errorf("silence by %q, comment %q: want carol's web identity, and the run", sil.CreatedBy, sil.Comment)
	}
	if left := time.Until(sil.EndsAt); left < 3*time.Hour+50*time.Minute || left > 4*time.Hour+time.Minute {
		t.Errorf("silence ends in %s, want 4 h", left)
	}
	waitFor(t, 30*time.Second, "the thread's reply", func() bool { return len(actionReplies(threadOf(t, stub, id))) > 0 })
	time.Sleep(2 * time.Second) // would a second silence or reply come, it would be by now
	rs := actionReplies(threadOf(t, stub, id))
	if len(rs) != 1 || !strings.Contains(rs[0].Text, "carol") || !strings.Contains(rs[0].Text, sil.ID) ||
		buttonValue(rs[0].Blocks, slacknotify.ActionUnsilence) == "" {
		t.Fatalf("action replies %+v, want one saying carol silenced %s, with Unsilence", rs, sil.ID)
	}
	if n := len(amSilences(t, am.URL)); n != 1 {
		t.Fatalf("%d silences, want 1", n)
	}
	_, page = d.do(t, get)
	if !strings.Contains(string(page), `id="silenced"`) || !strings.Contains(string(page), sil.ID) {
		t.Errorf("the run page does not show the silence %s", sil.ID)
	}
}

// TestSilenceFromRunPageInBrowser: in a real Chromium (its own Origin and
// Sec-Fetch-Site, the page's CSP), a click on the run page's "1 h" makes
// the silence and lands back on the page showing it; its Unsilence expires
// it. With no web.auth (loopback), the reader is signed in as web:open.
func TestSilenceFromRunPageInBrowser(t *testing.T) {
	t.Parallel()
	chromium := testenv.Tool(t, "chromium")
	am := testenv.StartAlertmanager(t, amNoReceivers)
	stub := newSlack(t)
	target := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	t.Cleanup(target.Close)
	o := &daemonOpts{Playbooks: silencePlaybook("E2EBrowserSilence", target.URL), Notify: silenceNotify(stub),
		More: alertmanagerAt(am.URL), LeaseTimeout: killLease}
	rig := &silenceRig{d: startDaemon(t, o), o: o, stub: stub, starts: time.Now().Add(-time.Minute)}
	id, _ := rig.fire(t, "E2EBrowserSilence", "5113ce0000000102")

	b := newBrowser(t, chromium)
	if code, text := b.open(t, rig.d.URL+"/runs/"+id); code != 200 || !strings.Contains(text, "Silence this alert") {
		t.Fatalf("the run page in the browser: %d\n%s", code, text)
	}
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#silence-form button[value="1h"]`)), chromedp.WaitReady(chromedp.ID("silenced"))); err != nil {
		t.Fatalf("chromium: click 1 h and wait for the silence: %v", err)
	}
	got := amSilences(t, am.URL)
	if len(got) != 1 || got[0].Status.State != "active" || !strings.Contains(got[0].CreatedBy, "web:open") {
		t.Fatalf("silences after the click: %+v, want one active, by web:open", got)
	}
	text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("silenced").innerText`))
	if err != nil || !strings.Contains(text, got[0].ID) {
		t.Fatalf("the page after the click says %q (%v), want the silence %s", text, err, got[0].ID)
	}
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#unsilence-form button`)), chromedp.WaitReady(chromedp.ID("silence-form"))); err != nil {
		t.Fatalf("chromium: click Unsilence and wait for the form: %v", err)
	}
	if got := amSilences(t, am.URL); len(got) != 1 || got[0].Status.State != "expired" {
		t.Fatalf("silences after Unsilence: %+v, want it expired", got)
	}
}
