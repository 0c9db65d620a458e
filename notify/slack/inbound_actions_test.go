package slack

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
)

// fakeTaker records what the actions asked of the run service.
type fakeTaker struct {
	mu      sync.Mutex
	taken   []Click
	refused []string
	private string
}

func (f *fakeTaker) Silence(_ context.Context, c Click) (ActionResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = append(f.taken, c)
	return ActionResult{Result: "done", Private: f.private}, nil
}

func (f *fakeTaker) Unsilence(ctx context.Context, c Click) (ActionResult, error) {
	return f.Silence(ctx, c)
}

func (f *fakeTaker) ProfileAgain(ctx context.Context, c Click) (ActionResult, error) {
	return f.Silence(ctx, c)
}

func (f *fakeTaker) Refused(_ context.Context, c Click, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, c.User.ID+": "+why)
	return nil
}

// actionsInbound is an Interactions with the thread's actions, taken by
// taker, open to users and the members of groups, against stub.
func actionsInbound(t *testing.T, stub *slackstub.Server, taker ActionTaker, access config.ActionAccess) (*Interactions, *prometheus.Registry) {
	t.Helper()
	return actionsInboundFor(t, stub, taker, config.SlackActions{Silence: access})
}

// actionsInboundFor is actionsInbound with every action's access.
func actionsInboundFor(t *testing.T, stub *slackstub.Server, taker ActionTaker, access config.SlackActions) (*Interactions, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := NewInteractions(InteractionsOptions{SigningSecret: config.Secret(signingSecret), Feedback: &fakeFeedback{},
		Registerer: reg, Log: zap.NewNop(), Actions: taker, Access: access,
		Token: config.Secret(canary), APIURL: stub.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return h, reg
}

func clickOn(t *testing.T, h *Interactions, u slackstub.Clicker, actionTS, actionID, value string) {
	t.Helper()
	clickAt(t, h, time.Now(), u, actionTS, actionID, value)
}

// clickAt is clickOn signed at at: a redelivery is signed anew.
func clickAt(t *testing.T, h *Interactions, at time.Time, u slackstub.Clicker, actionTS, actionID, value string) {
	t.Helper()
	body := slackstub.ClickAs(u, "C0AUTOCAP", "1795921200.000100", actionTS, actionID, value)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(body, slackstub.Signed(signingSecret, at, body), false))
	if rec.Code != 200 {
		t.Fatalf("click: %d %s", rec.Code, rec.Body)
	}
	h.Wait()
}

// TestActionsAccess: a listed user and a member of a listed group act; anyone
// else is refused, told why privately, kept and counted; the group's
// members are read once within groupTTL.
func TestActionsAccess(t *testing.T) {
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	stub.SetUserGroup("S0ONCALL", "U0CAROL")
	taker := &fakeTaker{}
	h, reg := actionsInbound(t, stub, taker, config.ActionAccess{Enabled: true, Users: []string{"U0ALICE"}, UserGroups: []string{"S0ONCALL"}})
	clickOn(t, h, slackstub.Clicker{ID: "U0ALICE", Name: "alice"}, "1.1", SilenceAction("4h"), "run-1")
	clickOn(t, h, slackstub.Clicker{ID: "U0CAROL", Name: "carol"}, "1.2", SilenceAction("resolved"), "run-1")
	clickOn(t, h, slackstub.Clicker{ID: "U0BOB", Name: "bob"}, "1.3", SilenceAction("1h"), "run-1")
	clickOn(t, h, slackstub.Clicker{ID: "U0CAROL", Name: "carol"}, "1.4", ActionUnsilence, "silence/run-1/x")
	if len(taker.taken) != 3 || taker.taken[0].Choice != "4h" || taker.taken[1].Choice != "resolved" ||
		taker.taken[2].Action != "unsilence" || taker.taken[2].Value != "silence/run-1/x" {
		t.Fatalf("taken %+v, want alice's 4h, carol's until resolved and carol's unsilence", taker.taken)
	}
	if taker.taken[0].Interaction != "1795921200.000100/1.1" || taker.taken[0].User.Name != "alice" {
		t.Errorf("click %+v: want the interaction as message ts/action_ts and the user", taker.taken[0])
	}
	if len(taker.refused) != 1 || !strings.HasPrefix(taker.refused[0], "U0BOB") {
		t.Fatalf("refused %v, want bob", taker.refused)
	}
	eph := stub.Ephemerals()
	if len(eph) != 1 || eph[0].User != "U0BOB" || !strings.Contains(eph[0].Text, "may not") || eph[0].ThreadTS != "1795921200.000100" {
		t.Fatalf("private answers %+v, want bob's refusal in the thread", eph)
	}
	lists := 0
	for _, c := range stub.Calls() {
		if c.Method == "usergroups.users.list" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("usergroups.users.list called %d times, want once (cached)", lists)
	}
	refused := testutil.ToFloat64(counterOf(t, reg, "silence", "refused"))
	if refused != 1 {
		t.Errorf("refused counted %v, want 1", refused)
	}
}

// TestActionsOffIgnoresClicks: with the action disabled, every click is refused.
func TestActionsOffIgnoresClicks(t *testing.T) {
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	taker := &fakeTaker{}
	h, _ := actionsInbound(t, stub, taker, config.ActionAccess{Everyone: true})
	clickOn(t, h, slackstub.Clicker{ID: "U0ALICE", Name: "alice"}, "1.1", SilenceAction("1h"), "run-1")
	if len(taker.taken) != 0 || len(taker.refused) != 1 {
		t.Fatalf("taken %v refused %v, want a refusal", taker.taken, taker.refused)
	}
}

func counterOf(t *testing.T, reg *prometheus.Registry, action, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "autocapture_slack_actions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["action"] == action && l["result"] == result {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
}

// TestActionsProfileAgainAccess: "Profile again" has its own access: a
// user allowed to silence but not to profile is refused, told why, kept
// and counted under the profile action; an allowed one's click reaches the
// run service as "profile" on the run.
func TestActionsProfileAgainAccess(t *testing.T) {
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	taker := &fakeTaker{}
	h, reg := actionsInboundFor(t, stub, taker, config.SlackActions{
		Silence: config.ActionAccess{Enabled: true, Users: []string{"U0ALICE"}},
		Profile: config.ActionAccess{Enabled: true, Users: []string{"U0CAROL"}}})
	clickOn(t, h, slackstub.Clicker{ID: "U0ALICE", Name: "alice"}, "1.1", ActionProfileAgain, "run-1")
	clickOn(t, h, slackstub.Clicker{ID: "U0CAROL", Name: "carol"}, "1.2", ActionProfileAgain, "run-1")
	if len(taker.taken) != 1 || taker.taken[0].Action != "profile" || taker.taken[0].Value != "run-1" || taker.taken[0].User.ID != "U0CAROL" {
		t.Fatalf("taken %+v, want carol's profile again of run-1 alone", taker.taken)
	}
	if len(taker.refused) != 1 || !strings.HasPrefix(taker.refused[0], "U0ALICE") {
		t.Fatalf("refused %v, want alice", taker.refused)
	}
	if eph := stub.Ephemerals(); len(eph) != 1 || eph[0].User != "U0ALICE" || !strings.Contains(eph[0].Text, "may not profile") {
		t.Fatalf("private answers %+v, want alice's refusal", eph)
	}
	if n := testutil.ToFloat64(counterOf(t, reg, "profile", "refused")); n != 1 {
		t.Errorf("refused profile clicks counted %v, want 1", n)
	}
}

// TestActionsRedeliveryRunsOnce: Slack's redelivery of a click (same message
// and action_ts) is not carried out or answered again; another click is.
func TestActionsRedeliveryRunsOnce(t *testing.T) {
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	taker := &fakeTaker{private: "Already silenced by alice."}
	h, _ := actionsInbound(t, stub, taker, config.ActionAccess{Enabled: true, Users: []string{"U0ALICE"}})
	alice, bob := slackstub.Clicker{ID: "U0ALICE", Name: "alice"}, slackstub.Clicker{ID: "U0BOB", Name: "bob"}
	clickOn(t, h, alice, "2.1", SilenceAction("1h"), "run-1")
	clickAt(t, h, time.Now().Add(time.Second), alice, "2.1", SilenceAction("1h"), "run-1") // the redelivery
	clickOn(t, h, alice, "2.2", SilenceAction("1h"), "run-1")                              // a second click
	clickOn(t, h, bob, "2.3", SilenceAction("1h"), "run-1")
	clickAt(t, h, time.Now().Add(time.Second), bob, "2.3", SilenceAction("1h"), "run-1") // a refused click's redelivery
	if len(taker.taken) != 2 || taker.taken[1].Interaction != "1795921200.000100/2.2" {
		t.Fatalf("taken %+v, want the first click and the second, not the redelivery", taker.taken)
	}
	if len(taker.refused) != 1 {
		t.Errorf("refused %v, want bob's click kept once", taker.refused)
	}
	if eph := stub.Ephemerals(); len(eph) != 3 {
		t.Errorf("private answers %+v, want 3: alice's two clicks and bob's refusal", eph)
	}
}
