package daemon

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
)

// TestServeSilenceFromThread: through the real binary, the stand-in and a
// real Alertmanager HA pair. alice's click on the parent's "Silence 1 h",
// clicked twice and retried, makes exactly one silence, made through the
// first member and seen by the second, with the alert's matchers and her
// name; the thread says so once, with Unsilence. bob, whom the config does
// not name, is answered privately and changes nothing. Unsilence expires
// the silence in Alertmanager. The parent shows the silence while it holds.
func TestServeSilenceFromThread(t *testing.T) {
	t.Parallel()
	pair := testenv.StartAlertmanagerPair(t, amNoReceivers)
	rig := newSilenceRig(t, "E2ESilence", false, pair[0].URL, pair[1].URL)
	d, stub := rig.d, rig.stub
	id, parent := rig.fire(t, "E2ESilence", "5113ce0000000001")
	if v := buttonValue(parent.Blocks, slacknotify.SilenceAction("1h")); v != id {
		t.Fatalf("the parent's Silence 1 h button carries %q, want the run %s; blocks %s", v, id, parent.Blocks)
	}

	click(t, d, alice, parent.TS, "1795921300.000001", slacknotify.SilenceAction("1h"), id)
	click(t, d, alice, parent.TS, "1795921300.000002", slacknotify.SilenceAction("1h"), id) // the double click
	click(t, d, alice, parent.TS, "1795921300.000001", slacknotify.SilenceAction("1h"), id) // Slack's retry of the first
	click(t, d, bob, parent.TS, "1795921300.000003", slacknotify.SilenceAction("4h"), id)   // not allowed

	var sil amSilence
	waitFor(t, 30*time.Second, "the silence, seen by the second Alertmanager", func() bool {
		got := amSilences(t, pair[1].URL)
		if len(got) == 1 {
			sil = got[0]
		}
		return len(got) == 1 && sil.Status.State == "active"
	})
	if m := sil.matchers(); m["alertname"] != "E2ESilence" || m["instance"] != "127.0.0.1:1" || len(m) != 2 {
		t.Errorf("silence matchers %v, want alertname and instance of the alert", m)
	}
	if !strings.Contains(sil.CreatedBy, "alice") || !strings.Contains(sil.CreatedBy, "U0ALICE") || !strings.Contains(sil.Comment, id) {
		t.Errorf("silence by %q, comment %q: want alice's name and id, and the run", sil.CreatedBy, sil.Comment)
	}
	if left := time.Until(sil.EndsAt); left < 50*time.Minute || left > 61*time.Minute {
		t.Errorf("silence ends in %s, want 1 h", left)
	}
	var reply string
	waitFor(t, 30*time.Second, "the thread's reply and bob's private answer", func() bool {
		rs := actionReplies(threadOf(t, stub, id))
		if len(rs) > 0 {
			reply = buttonValue(rs[0].Blocks, slacknotify.ActionUnsilence)
		}
		return len(rs) > 0 && len(stub.Ephemerals()) >= 2
	})
	time.Sleep(2 * time.Second) // would a second silence or reply come, it would be by now
	if rs := actionReplies(threadOf(t, stub, id)); len(rs) != 1 || !strings.Contains(rs[0].Text, "alice") ||
		!strings.Contains(rs[0].Text, sil.ID) || reply == "" {
		t.Fatalf("action replies %+v (unsilence %q), want one saying alice silenced %s, with Unsilence", rs, reply, sil.ID)
	}
	if n := len(amSilences(t, pair[0].URL)); n != 1 {
		t.Fatalf("%d silences, want 1", n)
	}
	toBob, toAlice := 0, 0
	for _, e := range stub.Ephemerals() {
		switch {
		case e.User == bob.ID && strings.Contains(e.Text, "may not"):
			toBob++
		case e.User == alice.ID && (strings.Contains(e.Text, "Already silenced by alice") || strings.Contains(e.Text, "right now")):
			toAlice++ // her double click
		default:
			t.Errorf("private answer %+v, want none but bob's refusal and alice's double click", e)
		}
	}
	if toBob != 1 || toAlice != 1 {
		t.Errorf("private answers: %d to bob, %d to alice, want one each: %+v", toBob, toAlice, stub.Ephemerals())
	}
	if v := d.metric(t, `autocapture_slack_actions_total{action="silence",result="refused"}`); v != 1 {
		t.Errorf("refused actions counted %v, want 1", v)
	}

	checkActionsKept(t, d, id, sil.ID)
	waitFor(t, 30*time.Second, "the parent to show the silence", func() bool {
		s := contextText(threadOf(t, stub, id), "silenced")
		return strings.Contains(s, "alice") && strings.Contains(s, sil.ID)
	})

	click(t, d, alice, parent.TS, "1795921300.000004", slacknotify.ActionUnsilence, reply)
	waitFor(t, 30*time.Second, "the silence expired in both Alertmanagers", func() bool {
		a, b := amSilences(t, pair[0].URL), amSilences(t, pair[1].URL)
		return len(a) == 1 && a[0].Status.State == "expired" && len(b) == 1 && b[0].Status.State == "expired"
	})
	waitFor(t, 30*time.Second, "the thread's unsilence reply, and the parent without the silence", func() bool {
		rs := actionReplies(threadOf(t, stub, id))
		return len(rs) == 2 && strings.Contains(rs[1].Text, "expired") && contextText(threadOf(t, stub, id), "silenced") == ""
	})
}

// TestServeSilenceAlertmanagerDown: with Alertmanager down, a click makes
// nothing, and the thread says so in words with what to do; the button
// still works: the next click, once Alertmanager is back, makes the silence.
func TestServeSilenceAlertmanagerDown(t *testing.T) {
	t.Parallel()
	am := testenv.StartAlertmanager(t, amNoReceivers)
	proxy := newHangingAM(t, am.URL)
	proxy.down.Store(true)
	rig := newSilenceRig(t, "E2ESilenceDown", false, proxy.srv.URL)
	d, stub := rig.d, rig.stub
	id, parent := rig.fire(t, "E2ESilenceDown", "5113ce0000000003")
	click(t, d, alice, parent.TS, "1795921500.000001", slacknotify.SilenceAction("24h"), id)
	waitFor(t, 30*time.Second, "the thread to say the silence failed", func() bool {
		return len(actionReplies(threadOf(t, stub, id))) == 1
	})
	rs := actionReplies(threadOf(t, stub, id))
	if txt := rs[0].Text; !strings.Contains(txt, "not made") || !strings.Contains(txt, "Alertmanager") ||
		!strings.Contains(txt, "click Silence again") || buttonValue(rs[0].Blocks, slacknotify.ActionUnsilence) != "" {
		t.Fatalf("the failure's reply %q (blocks %s): want why, what to do, and no Unsilence", txt, rs[0].Blocks)
	}
	if n := len(amSilences(t, am.URL)); n != 0 {
		t.Fatalf("%d silences while down, want 0", n)
	}
	proxy.down.Store(false)
	click(t, d, alice, parent.TS, "1795921500.000002", slacknotify.SilenceAction("24h"), id)
	waitFor(t, 30*time.Second, "the silence once Alertmanager is back", func() bool {
		s := amSilences(t, am.URL)
		return len(s) == 1 && s[0].Status.State == "active" && len(actionReplies(threadOf(t, stub, id))) == 2
	})
}

// checkActionsKept: the run keeps alice's silence and bob's refusal, in the
// API and on the run page.
func checkActionsKept(t *testing.T, d *daemon, id, silenceID string) {
	t.Helper()
	var done, refused int
	for _, a := range d.run(t, id).Actions {
		switch {
		case a.Kind == "silence" && a.State == "done" && a.User.ID == alice.ID && a.SilenceID == silenceID && a.Live:
			done++
		case a.Kind == "refused" && a.User.ID == bob.ID && strings.Contains(a.Detail, "notify.slack.actions"):
			refused++
		}
	}
	if done != 1 || refused != 1 {
		t.Errorf("the run keeps %+v: want alice's live silence and bob's refusal once each", d.run(t, id).Actions)
	}
	req, _ := http.NewRequest("GET", d.URL+"/runs/"+id, nil)
	code, page := d.do(t, req)
	if code != 200 || !strings.Contains(string(page), `id="actions"`) || !strings.Contains(string(page), silenceID) ||
		!strings.Contains(string(page), "U0BOB") {
		t.Errorf("run page: %d, want its Actions table with the silence %s and bob's refusal", code, silenceID)
	}
}

// TestServeSilenceUntilResolved: "until resolved" makes a silence that lasts
// (a week at most) until the run's alert resolves; the resolution expires it
// in Alertmanager, and the thread says so. An Unsilence whose expiry failed
// (Alertmanager down) stays usable: clicked again, it expires the silence.
func TestServeSilenceUntilResolved(t *testing.T) {
	t.Parallel()
	am := testenv.StartAlertmanager(t, amNoReceivers)
	proxy := newHangingAM(t, am.URL)
	rig := newSilenceRig(t, "E2ESilenceResolved", false, proxy.srv.URL)
	d, stub := rig.d, rig.stub
	id0, p0 := rig.fire(t, "E2ESilenceResolved", "5113ce0000000004")
	id1, p1 := rig.fire(t, "E2ESilenceResolved", "5113ce0000000005")
	ids := []string{id0, id1}
	click(t, d, alice, p0.TS, "1795921600.000001", slacknotify.SilenceAction("resolved"), ids[0])
	waitFor(t, 30*time.Second, "the first silence", func() bool { return len(actionReplies(threadOf(t, stub, ids[0]))) == 1 })
	sils := amSilences(t, am.URL)
	if len(sils) != 1 || time.Until(sils[0].EndsAt) < 6*24*time.Hour {
		t.Fatalf("silences %+v, want one lasting about a week", sils)
	}
	if code, b := d.post(t, webhookBody("E2ESilenceResolved", "5113ce0000000004", "resolved", rig.starts)); code != 200 {
		t.Fatalf("resolved webhook: %d %s", code, b)
	}
	waitFor(t, 30*time.Second, "the resolution to expire the silence", func() bool {
		s := amSilences(t, am.URL)
		return len(s) == 1 && s[0].Status.State == "expired"
	})
	waitFor(t, 30*time.Second, "the thread to say so", func() bool {
		rs := actionReplies(threadOf(t, stub, ids[0]))
		return len(rs) == 2 && strings.Contains(rs[1].Text, "alert resolved")
	})

	// The second run: silenced for an hour; Unsilence fails while
	// Alertmanager is down, then works when clicked again.
	click(t, d, alice, p1.TS, "1795921600.000002", slacknotify.SilenceAction("1h"), ids[1])
	var unsilence string
	waitFor(t, 30*time.Second, "the second silence", func() bool {
		rs := actionReplies(threadOf(t, stub, ids[1]))
		if len(rs) == 1 {
			unsilence = buttonValue(rs[0].Blocks, slacknotify.ActionUnsilence)
		}
		return unsilence != ""
	})
	proxy.down.Store(true)
	click(t, d, alice, p1.TS, "1795921600.000003", slacknotify.ActionUnsilence, unsilence)
	waitFor(t, 30*time.Second, "the failed unsilence's reply", func() bool {
		rs := actionReplies(threadOf(t, stub, ids[1]))
		return len(rs) == 2 && strings.Contains(rs[1].Text, "failed")
	})
	proxy.down.Store(false)
	click(t, d, alice, p1.TS, "1795921600.000004", slacknotify.ActionUnsilence, unsilence)
	waitFor(t, 30*time.Second, "the second unsilence to expire it", func() bool {
		rs := actionReplies(threadOf(t, stub, ids[1]))
		active := 0
		for _, s := range amSilences(t, am.URL) {
			if s.Status.State == "active" {
				active++
			}
		}
		return active == 0 && len(rs) == 3 && strings.Contains(rs[2].Text, "expired silence")
	})
}
