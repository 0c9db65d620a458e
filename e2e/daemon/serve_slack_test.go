package daemon

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// slackPlaybook has a fast tier-1 step and a tier-2 step against target.
func slackPlaybook(target string) string { return twoStepPlaybook("slack-thread", "E2ESlack", target) }

// slackChannel is the stand-in's channel, with an id shaped like Slack's.
const slackChannel = "C0AUTOCAP1"

func newSlack(t testing.TB) *slackstub.Server {
	return slackstub.New(t, slackstub.WithChannel(slackChannel, "alerts"))
}

func slackNotify(stub *slackstub.Server) string {
	return fmt.Sprintf("  slack:\n    enabled: true\n    token: xoxb-test\n    api_url: %q\n    channel: %s\n", stub.URL(), slackChannel)
}

// threadOf returns the channel's one parent for the run and fails unless
// there is exactly one.
func threadOf(t *testing.T, stub *slackstub.Server, runID string) slackstub.Message {
	t.Helper()
	var found []slackstub.Message
	for _, m := range stub.Messages(slackChannel) {
		if md := m.Metadata; md != nil && md.EventPayload["run_id"] == runID {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d parents for run %s, want exactly 1\n%s", len(found), runID, stub.Dump())
	}
	return found[0]
}

// replyKeys lists the operation keys of a thread's replies, in order.
func replyKeys(m slackstub.Message) []string {
	var keys []string
	for _, r := range m.Replies {
		k := ""
		if r.Metadata != nil {
			k, _ = r.Metadata.EventPayload["key"].(string)
		}
		keys = append(keys, k)
	}
	return keys
}

// checkOnce fails when a key appears other than once among keys.
func checkOnce(t *testing.T, keys []string, want ...string) {
	t.Helper()
	n := map[string]int{}
	for _, k := range keys {
		n[k]++
	}
	for _, w := range want {
		if n[w] != 1 {
			t.Errorf("reply %s posted %d times, want once; thread %v", w, n[w], keys)
		}
	}
}

// TestServeSlackThread: the real binary posts one thread per run through the
// outbox — a parent before any step, one reply per step in order, the parent
// updated at the end and at the resolution — even when Slack applies a post
// and drops the connection before answering (the deliverer finds the message
// by its metadata instead of posting it again), and answers 429 for a while.
func TestServeSlackThread(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	stub.Fail("chat.postMessage", slackstub.DropAfterApply().Times(2))
	stub.Fail("chat.postMessage", slackstub.RateLimited(1).Skip(2).Times(2))
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	d := startDaemon(t, &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub)})
	start := time.Now().Add(-time.Minute)
	code, b := d.post(t, webhookBody("E2ESlack", "5lack5lack5lack0", "firing", start))
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	waitFor(t, 60*time.Second, "the run to finish", func() bool {
		r := d.run(t, id)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	want := []string{"step/slack-thread/fast", "step/slack-thread/slow", "close/finished"}
	waitFor(t, 60*time.Second, "the thread to show the end", func() bool {
		ms := stub.Messages(slackChannel)
		return len(ms) > 0 && strings.Contains(strings.Join(replyKeys(ms[len(ms)-1]), " "), "close/finished")
	})
	parent := threadOf(t, stub, id)
	keys := replyKeys(parent)
	checkOnce(t, keys, want...)
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("thread replies %v, want %v in that order", keys, want)
	}
	if !strings.Contains(parent.Text, "succeeded") {
		t.Errorf("parent after the run: %q, want it to say succeeded", parent.Text)
	}

	d.post(t, webhookBody("E2ESlack", "5lack5lack5lack0", "resolved", start))
	waitFor(t, 60*time.Second, "the thread to show the resolution", func() bool {
		ms := stub.Messages(slackChannel)
		return len(ms) > 0 && strings.Contains(strings.Join(replyKeys(ms[len(ms)-1]), " "), "close/resolved")
	})
	parent = threadOf(t, stub, id)
	checkOnce(t, replyKeys(parent), append(want, "close/resolved")...)
	if !strings.Contains(strings.ToLower(parent.Text), "resolved") {
		t.Errorf("parent after the resolution: %q, want it to say resolved", parent.Text)
	}
}

// TestServeSlackThreadAcrossKill9: kill -9 while a step runs, restart on the
// same store: one parent, each step's reply once, the resume said once.
func TestServeSlackThreadAcrossKill9(t *testing.T) {
	stub := newSlack(t)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	o := &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub),
		DatabaseURL: testenv.StartPostgres(t), LeaseTimeout: killLease}
	id := killMidStep(t, o, target, webhookBody("E2ESlack", "5lack5lack5lack1", "firing", time.Now().Add(-time.Minute)))
	d2 := startDaemon(t, o)
	waitFor(t, 90*time.Second, "the thread to show the end after the restart", func() bool {
		for _, m := range stub.Messages(slackChannel) {
			if strings.Contains(strings.Join(replyKeys(m), " "), "close/finished") {
				return true
			}
		}
		return false
	})
	if r := d2.run(t, id); r.Status != vocab.StatusSucceeded || r.Resumed != 1 {
		t.Fatalf("run %+v, want succeeded after one resume", r)
	}
	keys := replyKeys(threadOf(t, stub, id))
	checkOnce(t, keys, "step/slack-thread/fast", "step/slack-thread/slow", "run/resumed/1", "close/finished")
}

// TestServeSlackThroughRateLimits: for 20 s about 30 % of every Slack call
// is answered 429 (Retry-After 1 s); five runs' threads still arrive whole:
// every step's reply and the end once each, in order, nothing lost.
func TestServeSlackThroughRateLimits(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	stub.Fail("*", slackstub.RateLimited(1).Fraction(0.3, 7).For(20*time.Second))
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 8)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	d := startDaemon(t, &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub)})
	var ids []string
	for i := range 5 {
		code, b := d.post(t, webhookBody("E2ESlack", fmt.Sprintf("ratelimit%07d", i), "firing", time.Now().Add(-time.Minute)))
		if code != 200 {
			t.Fatalf("webhook: %d %s", code, b)
		}
		ids = append(ids, runID(b))
	}
	want := []string{"step/slack-thread/fast", "step/slack-thread/slow", "close/finished"}
	waitFor(t, 120*time.Second, "every thread to show its end", func() bool {
		done := 0
		for _, m := range stub.Messages(slackChannel) {
			if strings.Contains(strings.Join(replyKeys(m), " "), "close/finished") {
				done++
			}
		}
		return done == len(ids)
	})
	limited := 0
	for _, c := range stub.Calls() {
		if c.Outcome == slackstub.OutcomeRateLimited {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("no call was rate limited: the test proves nothing")
	}
	for _, id := range ids {
		keys := replyKeys(threadOf(t, stub, id))
		if strings.Join(keys, " ") != strings.Join(want, " ") {
			t.Errorf("run %s: thread %v, want %v (each once, in order)", id, keys, want)
		}
	}
	t.Logf("%d calls answered 429; every thread whole", limited)
}

// TestServeSlackTwoReplicasOneThread: two daemons on one PostgreSQL both
// receive the same alert (as from an HA pair of Alertmanagers): one run, one
// thread, each reply once.
func TestServeSlackTwoReplicasOneThread(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	target := &slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 8)}
	srv := httptest.NewServer(target)
	defer srv.Close()
	pg := testenv.StartPostgres(t)
	a := startDaemon(t, &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub), DatabaseURL: pg})
	b := startDaemon(t, &daemonOpts{Token: "slack", Playbooks: slackPlaybook(srv.URL), Notify: slackNotify(stub), DatabaseURL: pg})
	body := webhookBody("E2ESlack", "replicas00000001", "firing", time.Now().Add(-time.Minute))
	_, ra := a.post(t, body)
	_, rb := b.post(t, body)
	if runID(ra) == "" || runID(ra) != runID(rb) {
		t.Fatalf("replicas answered runs %q and %q, want one", runID(ra), runID(rb))
	}
	waitFor(t, 60*time.Second, "the thread to show the end", func() bool {
		for _, m := range stub.Messages(slackChannel) {
			if strings.Contains(strings.Join(replyKeys(m), " "), "close/finished") {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // a doubled post from the other replica would land by now
	checkOnce(t, replyKeys(threadOf(t, stub, runID(ra))), "step/slack-thread/fast", "step/slack-thread/slow", "close/finished")
}
