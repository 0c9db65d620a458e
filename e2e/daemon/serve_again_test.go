package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/runs"
)

// "Profile again" through the real binary, the strict Slack stand-in and a
// real vllmsim (the tier-3 harness: serve_profile_harness_test.go), with the
// silence tests' clicks (serve_silence_helpers_test.go).

// againRig is a daemon whose parent offers Profile again to alice alone,
// over a sim whose every alert is profiled (the harness playbook).
type againRig struct {
	d    *daemon
	stub *slackstub.Server
	sim  *pfSim
}

func newAgainRig(t *testing.T, cooldown time.Duration, postgres bool) *againRig {
	t.Helper()
	sim := startPFSim(t, pfSimOpts{})
	stub := newSlack(t)
	port := testenv.FreePort(t)
	o := &daemonOpts{Port: port, Web: fmt.Sprintf("  external_url: http://127.0.0.1:%d\n", port), Token: "again", BasicAuth: fmt.Sprintf("{username: %s, password: %s}", pfOperator, pfPassword),
		Playbooks: pfPlaybook(pfStep{Dir: sim.Dir, Duration: time.Second, StopTimeout: 30 * time.Second, Cooldown: cooldown}),
		Notify: slackNotify(stub) + "    signing_secret: " + silenceSecret + "\n" +
			"    actions:\n      profile:\n        enabled: true\n        users: [U0ALICE]\n",
		Profiling: "  max_concurrent: 8\n  max_per_hour: 100\n  max_duration: 1m\n  sweep_interval: 1s\n  stop_timeout: 10s\n"}
	if postgres {
		o.DatabaseURL = testenv.StartPostgres(t)
	}
	return &againRig{d: startDaemon(t, o), stub: stub, sim: sim}
}

// first fires the alert, waits for its run (and its capture) to end and
// returns the run and its parent once it offers Profile again.
func (r *againRig) first(t *testing.T, fp string) (runs.Run, slackstub.Message) {
	t.Helper()
	run := pfWaitRun(t, r.d, pfFire(t, r.d, fp, r.sim.Inst, time.Now().Add(-time.Minute)))
	var parent slackstub.Message
	waitFor(t, 30*time.Second, "the parent with Profile again", func() bool {
		parent = threadOf(t, r.stub, run.ID)
		return buttonValue(parent.Blocks, slacknotify.ActionProfileAgain) == run.ID
	})
	return run, parent
}

// againRuns are the runs other than first's: the ones clicks made.
func (r *againRig) againRuns(t *testing.T, first string) []runs.Run {
	t.Helper()
	var out []runs.Run
	for _, x := range r.d.runsN(t, pfAlertname) {
		if x.ID != first {
			out = append(out, r.d.run(t, x.ID)) // with its steps
		}
	}
	return out
}

// TestServeProfileAgain: alice's click on the parent's Profile again,
// clicked twice and retried by Slack, takes ONE more capture of the same
// instance (one more start at the sim), as a run that posts no thread of
// its own, and ONE reply in the first run's thread compares it with the
// first capture. bob, whom the config does not name, is answered privately
// and changes nothing; the refusal is counted. On SQLite and PostgreSQL.
func TestServeProfileAgain(t *testing.T) {
	t.Parallel()
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			t.Parallel()
			rig := newAgainRig(t, 0, pg)
			first, parent := rig.first(t, "a6a1a6a1a6a1a6a1")
			if n := rig.sim.count("/start_profile"); n != 1 {
				t.Fatalf("%d starts after the first run, want 1", n)
			}
			clicked := time.Now()
			click(t, rig.d, alice, parent.TS, "1795922000.000001", slacknotify.ActionProfileAgain, first.ID)
			click(t, rig.d, alice, parent.TS, "1795922000.000002", slacknotify.ActionProfileAgain, first.ID) // the double click
			click(t, rig.d, alice, parent.TS, "1795922000.000001", slacknotify.ActionProfileAgain, first.ID) // Slack's retry
			click(t, rig.d, bob, parent.TS, "1795922000.000003", slacknotify.ActionProfileAgain, first.ID)   // not allowed

			var reply slackstub.Message
			waitFor(t, 2*time.Minute, "the comparison in the first run's thread", func() bool {
				rs := actionReplies(threadOf(t, rig.stub, first.ID))
				if len(rs) > 0 {
					reply = rs[0]
				}
				return len(rs) > 0
			})
			replied := time.Since(clicked)
			time.Sleep(2 * time.Second) // a second run, capture or reply would be here by now
			again := rig.againRuns(t, first.ID)
			if len(again) != 1 || !pfFinished(again[0].Status) {
				t.Fatalf("runs made by the clicks: %+v, want one, ended", again)
			}
			prof := pfMustStep(t, again[0], "profile")
			t.Logf("profile again: the reply came %v after the click (1 s frame); run %s %s, step %s %q; reply %q",
				replied.Round(time.Millisecond), again[0].ID, again[0].Status, prof.Status, prof.Summary, reply.Text)
			if n := rig.sim.count("/start_profile"); n != 2 {
				t.Errorf("%d starts at the sim, want 2: the first capture and one again", n)
			}
			if len(again[0].Steps) != 1 || prof.Status != "succeeded" {
				t.Errorf("the run again ran %+v, want the profile step alone (the harness playbook has no scrape), succeeded", again[0].Steps)
			}
			if rs := actionReplies(threadOf(t, rig.stub, first.ID)); len(rs) != 1 {
				t.Errorf("%d action replies, want 1", len(rs))
			}
			for _, want := range []string{"alice", "again", "now", "first capture", "Run now", "Run first"} {
				if !strings.Contains(reply.Text+string(reply.Blocks), want) {
					t.Errorf("the reply lacks %q: %s %s", want, reply.Text, reply.Blocks)
				}
			}
			for _, m := range rig.stub.Messages(slackChannel) {
				if m.Metadata != nil && m.Metadata.EventPayload["run_id"] == again[0].ID {
					t.Errorf("the run again posted a parent of its own: %s", m.Text)
				}
			}
			toBob, done, already := 0, 0, 0
			for _, e := range rig.stub.Ephemerals() {
				switch {
				case e.User == bob.ID && strings.Contains(e.Text, "may not profile"):
					toBob++
				case e.User == alice.ID && strings.Contains(e.Text, "Profiling http://"+rig.sim.Inst+" again now"):
					done++
				case e.User == alice.ID && strings.Contains(e.Text, "Already profiling http://"+rig.sim.Inst+" again (asked by alice"):
					already++ // her double click; the retry too when it overtook its click (the clicks run at once)
				default:
					t.Errorf("private answer %+v, want bob's refusal, alice's start and her double click's", e)
				}
			}
			if toBob != 1 || done != 1 || already < 1 || already > 2 {
				t.Errorf("private answers: %d to bob, %d started and %d already to alice, want 1, 1 and 1 or 2: %+v",
					toBob, done, already, rig.stub.Ephemerals())
			}
			if v := rig.d.metric(t, `autocapture_slack_actions_total{action="profile",result="refused"}`); v != 1 {
				t.Errorf("refused profile clicks counted %v, want 1", v)
			}
		})
	}
}

// TestServeProfileAgainRefusedByGuard: within the target's profile
// cooldown, a click starts nothing: alice is told at once, and the thread
// says, which guard refused and when it frees.
func TestServeProfileAgainRefusedByGuard(t *testing.T) {
	t.Parallel()
	rig := newAgainRig(t, 30*time.Minute, false)
	first, parent := rig.first(t, "a6a2a6a2a6a2a6a2")
	click(t, rig.d, alice, parent.TS, "1795922100.000001", slacknotify.ActionProfileAgain, first.ID)
	var reply slackstub.Message
	waitFor(t, 30*time.Second, "the refusal in the thread", func() bool {
		rs := actionReplies(threadOf(t, rig.stub, first.ID))
		if len(rs) > 0 {
			reply = rs[0]
		}
		return len(rs) > 0 && len(rig.stub.Ephemerals()) > 0
	})
	for _, text := range []string{reply.Text, rig.stub.Ephemerals()[0].Text} {
		if !strings.Contains(text, "cooldown") || !strings.Contains(text, "next from") {
			t.Errorf("%q: want the cooldown named, and when it frees", text)
		}
	}
	if n := rig.sim.count("/start_profile"); n != 1 || len(rig.againRuns(t, first.ID)) != 0 {
		t.Errorf("%d starts, runs again %+v: want nothing started", n, rig.againRuns(t, first.ID))
	}
}
