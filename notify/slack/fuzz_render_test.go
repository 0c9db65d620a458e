package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/hostile"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// FuzzRenderers renders any alert text as the console and the Slack parent,
// step reply, verdict, notice and group member: no control, bidi or
// invisible character and no unescaped markup (a <…> token, a bare mention,
// a closed code span) reaches the output.
//
//	go test ./notify/slack -run '^$' -fuzz FuzzRenderers -fuzztime 60s
func FuzzRenderers(f *testing.F) {
	for _, c := range hostile.Cases() {
		if len(c.Value) < 1<<12 {
			f.Add(c.Value)
		}
	}
	f.Fuzz(func(t *testing.T, v string) {
		run := testRun()
		run.Alert.Labels = map[string]string{"alertname": v, "severity": v, "instance": v, "model_name": v}
		run.Alert.Annotations = map[string]string{"summary": v}
		ve := &vocab.Verdict{ID: "overload", Evidence: []string{v}, Advice: []string{v}}
		r := step("s", "scrape", vocab.TierMetrics, "failed", v)
		r.Reason, r.Error, r.Verdict = v, v, ve
		r.Links = []notify.Link{{Name: v, URL: "https://x.example/?a=" + v}}
		p := ParentFromRun(run, r.Links).Apply(notify.Summary{Status: "failed", Verdict: ve})
		msgs := []Message{RenderParent(p), RenderReply(r), RenderNotice(notify.StepReport{Notice: v, Summary: v}),
			RenderMemberReply(notify.MemberReport{Member: notify.Member{Instance: v, Model: v, Status: "failed"}, Reason: v})}
		for _, m := range msgs {
			checkSlackMarkup(t, "text", m.Text)
			b, err := json.Marshal(m.Blocks)
			if err != nil {
				t.Fatal(err)
			}
			var blocks any
			if err := json.Unmarshal(b, &blocks); err != nil {
				t.Fatal(err)
			}
			plain, mrkdwn := texts(blocks)
			for _, s := range mrkdwn {
				checkSlackMarkup(t, "block", s)
			}
			for _, s := range plain {
				if err := hostile.Controls(s, false); err != nil {
					t.Errorf("plain text: %v", err)
				}
			}
		}
		var out bytes.Buffer
		c := notify.NewConsole(&out)
		th, _ := c.Open(context.Background(), run)
		_ = c.Reply(context.Background(), th, r)
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if err := hostile.Controls(line, false); err != nil {
				t.Errorf("console: %v", err)
			}
			if !strings.HasPrefix(line, "── run r1 ") && !strings.HasPrefix(line, "   ") {
				t.Errorf("console line not its own: %.80q", line)
			}
		}
	})
}
