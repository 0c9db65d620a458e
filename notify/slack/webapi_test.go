package slack

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/slackstub/slackspec"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// webAPIMethods is every Web API method the notifier calls; driveEverything
// makes it call each.
var webAPIMethods = []string{"chat.postEphemeral", "chat.postMessage", "chat.update", "conversations.history", "conversations.list",
	"conversations.replies", "files.completeUploadExternal", "files.getUploadURLExternal", "usergroups.users.list"}

// driveEverything runs the real notifier through all it does against the
// stub: a retried open of a thread in a channel given by name (the id looked
// up, the history searched for a lost parent), a reply with a chart (the
// three-step upload), the same reply retried (the thread read back), the
// parent edited from its metadata read back and from the run, with and
// without a closing reply; then a click on a thread's action by someone
// outside the allowed user group (the group read, a private answer).
func driveEverything(t *testing.T) *slackstub.Server {
	t.Helper()
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	cfg := config.Default().Notify.Slack
	cfg.Enabled, cfg.Token, cfg.Channel, cfg.APIURL = true, config.Secret(canary), "#alerts", stub.URL()
	cfg.Pace = config.Pace{PerSecond: 1000, Burst: 10}
	cfg.SigningSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	n, err := New(cfg, memStore{"runs/r1/kv_chart/chart.png": png}, zap.NewNop(), WithExternalURL("http://autocapture:9095/"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := testRun()
	run.Retry = true
	th, err := n.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	chart := step("kv_chart", "chart", vocab.TierMetrics, "succeeded", "KV cache usage: 1 series, max 0.98 ratio")
	chart.Files = []notify.File{{Name: "chart.png", Key: "runs/r1/kv_chart/chart.png", ContentType: "image/png", Size: int64(len(png))}}
	if err := n.Reply(ctx, th, chart); err != nil {
		t.Fatal(err)
	}
	chart.Retry = true
	if err := n.Reply(ctx, th, chart); err != nil {
		t.Fatal(err)
	}
	resolved := at.Add(14 * time.Minute)
	for _, s := range []notify.Summary{
		{RunID: "r1", Key: notify.KeyCloseVerdictPreliminary, Status: "running", Verdict: kvVe},
		{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: kvVe},
		{RunID: "r1", Key: notify.KeyCloseFinished, Status: "succeeded", Duration: 6 * time.Minute, Verdict: kvVe, Run: &run, Retry: true},
		{RunID: "r1", Key: notify.KeyCloseResolved, Status: "succeeded", ResolvedAt: &resolved, Run: &run},
	} {
		if err := n.Close(ctx, th, s); err != nil {
			t.Fatalf("close %s: %v", s.Key, err)
		}
	}
	if p := stub.Messages("C0AUTOCAP"); len(p) != 1 || len(p[0].Replies) < 3 {
		t.Fatalf("the drive did not build the thread:\n%s", stub.Dump())
	}
	// The thread's actions: a user group read, a refused click answered privately.
	stub.SetUserGroup("S0ONCALL", "U0CAROL")
	h, _ := actionsInbound(t, stub, &fakeTaker{}, config.ActionAccess{Enabled: true, UserGroups: []string{"S0ONCALL"}})
	clickOn(t, h, slackstub.Clicker{ID: "U0BOB", Name: "bob"}, "1.1", SilenceAction("1h"), "r1")
	if len(stub.Ephemerals()) != 1 {
		t.Fatalf("the drive did not answer the refused click privately:\n%+v", stub.Calls())
	}
	return stub
}

// TestWebAPICallsMatchSlacksDescription: every Web API call the notifier
// makes is one Slack's published description (or a later addition from
// Slack's method docs) describes: the method, the verb, the body type, where
// the token goes, no argument the method does not take, every required one,
// each of its type. The bytes sent to an upload_url are no Web API method:
// they must be a POST.
func TestWebAPICallsMatchSlacksDescription(t *testing.T) {
	spec := slackspec.Load(t)
	stub := driveEverything(t)
	seen := map[string]map[string]bool{} // method → "arg (place)"
	for _, c := range stub.Calls() {
		if c.Outcome != slackstub.OutcomeOK {
			t.Errorf("%s answered %s %s", c.Method, c.Outcome, c.Error)
		}
		if c.Method == "upload" {
			if c.Request.HTTPMethod != "POST" || !c.Request.HasBody {
				t.Errorf("upload: %+v, want a POST of the bytes", c.Request)
			}
			continue
		}
		for _, bad := range spec.Check(c.Method, c.Request) {
			t.Error(bad)
		}
		if seen[c.Method] == nil {
			seen[c.Method] = map[string]bool{}
		}
		seen[c.Method][c.Request.HTTPMethod+" "+c.Request.ContentType] = true
		for _, a := range c.Request.Args {
			seen[c.Method][fmt.Sprintf("%s (%s)", a.Name, a.In)] = true
		}
	}
	var methods []string
	for m, args := range seen {
		methods = append(methods, m)
		t.Logf("%s: %s", m, strings.Join(slices.Sorted(maps.Keys(args)), ", "))
	}
	slices.Sort(methods)
	if !slices.Equal(methods, webAPIMethods) {
		t.Errorf("the notifier called %v, want %v: extend driveEverything (and webAPIMethods) to each method it calls", methods, webAPIMethods)
	}
}
