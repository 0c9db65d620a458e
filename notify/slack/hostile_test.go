package slack

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/hostile"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// TestHostileThreadInStub posts a whole thread whose alert, step and close
// carry each hostile string through the notifier into Slack's stand-in, and
// checks every text Slack would render: parent (each revision), replies,
// verdict, group member.
func TestHostileThreadInStub(t *testing.T) {
	for _, hc := range hostile.Cases() {
		t.Run(hc.Name, func(t *testing.T) {
			stub, n, _ := setup(t)
			ctx := context.Background()
			v := hc.Value
			run := testRun()
			run.Alert.Labels = map[string]string{"alertname": v, "severity": v, "instance": v, "model_name": v}
			run.Alert.Annotations = map[string]string{"summary": v}
			th, err := n.Open(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			r := step("scrape", "scrape", vocab.TierMetrics, "failed", v)
			r.Reason, r.Error = v, v
			r.Links = []notify.Link{{Name: v, URL: "https://prom.example/graph?g0.expr=up&g0.tab=1"}, {Name: v, URL: "file:///" + v}}
			ve := &vocab.Verdict{ID: "overload", Evidence: []string{v}, Advice: []string{v}}
			tri := step("triage", "triage", vocab.TierTriage, "succeeded", v)
			tri.Verdict = ve
			member := notify.StepReport{Member: &notify.MemberReport{Member: notify.Member{RunID: "r2", Alert: v, Instance: v, Model: v, Status: "failed"},
				Reason: v, Steps: []notify.StepReport{{StepID: "s", Kind: "scrape", Status: "failed", Summary: v}}}}
			for _, rep := range []notify.StepReport{r, tri, {StepID: "run", Kind: "run", Status: "running", Key: "run/x", Notice: v, Summary: v}, member} {
				if err := n.Reply(ctx, th, rep); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseFinished, Status: "failed", Reason: v, Verdict: ve}); err != nil {
				t.Fatal(err)
			}
			msgs := stub.Messages("C0AUTOCAP")
			if len(msgs) != 1 {
				t.Fatalf("%d top-level messages", len(msgs))
			}
			checkMessage(t, "parent", msgs[0])
			for _, rep := range msgs[0].Replies {
				checkMessage(t, "reply", rep)
			}
		})
	}
}

func checkMessage(t *testing.T, where string, m slackstub.Message) {
	t.Helper()
	for _, rev := range m.Revisions {
		checkSlackText(t, where+" text", rev.Text)
		var blocks any
		if err := json.Unmarshal(rev.Blocks, &blocks); rev.Blocks != nil && err != nil {
			t.Fatalf("%s blocks: %v", where, err)
		}
		plain, mrkdwn := texts(blocks)
		for _, s := range mrkdwn {
			checkSlackText(t, where+" block", s)
		}
		for _, s := range plain {
			if err := hostile.Controls(s, false); err != nil {
				t.Errorf("%s plain text: %v", where, err)
			}
		}
	}
}

var (
	slackToken  = regexp.MustCompile(`<[^>]*>`)
	bareMention = regexp.MustCompile(`(?i)(^|[^＠\pL\pN])@(here|channel|everyone)\b`)
	rawAmp      = regexp.MustCompile(`&(?:[^agl]|$)`)
)

// checkSlackText holds one text to what Slack must not see from an alert:
// control or invisible characters, a <…> token other than our links and
// dates, a bare mention, an unescaped & in a link, markup outside a code
// span that a value closed early.
func checkSlackText(t *testing.T, where, s string) {
	t.Helper()
	checkSlackMarkup(t, where, s)
	if strings.Count(s, "`")%2 != 0 {
		t.Errorf("%s: a code span left open: %.80q", where, s)
	}
	for i, seg := range strings.Split(s, "`") {
		if i%2 == 0 && strings.Contains(seg, "*bold*") {
			t.Errorf("%s: markup escaped a code span: %.80q", where, s)
		}
	}
}

// checkSlackMarkup is checkSlackText for any input: a value's own *bold* or
// backtick may take effect as formatting (Slack has no escape for them).
func checkSlackMarkup(t *testing.T, where, s string) {
	t.Helper()
	if err := hostile.Controls(s, true); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if err := hostile.Marks(s); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	for _, tok := range slackToken.FindAllString(s, -1) {
		if !strings.HasPrefix(tok, "<https://") && !strings.HasPrefix(tok, "<http://") && !strings.HasPrefix(tok, "<!date^") {
			t.Errorf("%s: Slack token %.60q", where, tok)
		}
		if rawAmp.MatchString(tok) {
			t.Errorf("%s: unescaped & in link %.80q", where, tok)
		}
	}
	if m := bareMention.FindString(slackToken.ReplaceAllString(s, " ")); m != "" { // a link's URL mentions no one
		t.Errorf("%s: bare mention %q", where, m)
	}
}

// texts collects every text object of decoded Block Kit JSON, plain
// (shown as written) or mrkdwn.
func texts(v any) (plain, mrkdwn []string) {
	switch x := v.(type) {
	case map[string]any:
		if s, ok := x["text"].(string); ok {
			if x["type"] == "plain_text" {
				plain = append(plain, s)
			} else {
				mrkdwn = append(mrkdwn, s)
			}
		}
		for _, e := range x {
			p, m := texts(e)
			plain, mrkdwn = append(plain, p...), append(mrkdwn, m...)
		}
	case []any:
		for _, e := range x {
			p, m := texts(e)
			plain, mrkdwn = append(plain, p...), append(mrkdwn, m...)
		}
	}
	return plain, mrkdwn
}
