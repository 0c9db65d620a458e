package slack

import (
	"context"
	"encoding/json"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// TestReplyLinksTheRepeatedVerdict, through the stand-in: a verdict's reply
// that repeats an earlier run's says so right under the verdict, linking
// the earlier run's page (with a page token for that run), its verdict's
// evidence there and its key artifact; a reply without a verdict says
// nothing of it.
func TestReplyLinksTheRepeatedVerdict(t *testing.T) {
	n, stub, signer := signingNotifier(t, time.Hour)
	ctx := context.Background()
	th, err := n.Open(ctx, testRun())
	if err != nil {
		t.Fatal(err)
	}
	repeat := &notify.Repeat{Run: notify.SeenRun{ID: "r0", Verdict: vocab.VerdictKVPressure, SameInstance: true},
		Before: 50 * time.Hour, EvidenceName: "profile-report.json",
		EvidenceLink: &notify.Link{Name: "profile-report.json", URL: "https://ac.example/artifacts/r0/profile-report.json?sig=x"}}
	verdict := &vocab.Verdict{ID: vocab.VerdictKVPressure, Evidence: []string{"KV cache 99% full"}}
	for _, r := range []notify.StepReport{
		{RunID: "r1", StepID: "triage", Kind: "triage", Status: "succeeded", Verdict: verdict, Repeat: repeat, Key: "step/p/triage"},
		{RunID: "r1", StepID: "fast", Kind: "http", Status: "succeeded", Repeat: repeat, Key: "step/p/fast"},
	} {
		if err := n.Reply(ctx, th, r); err != nil {
			t.Fatal(err)
		}
	}
	replies := stub.Messages("C0AUTOCAP")[0].Replies
	if len(replies) != 2 {
		t.Fatalf("%d replies, want 2", len(replies))
	}
	ids, line := blockIDs(t, replies[0].Blocks)
	if want := "step verdict repeat"; strings.Join(ids, " ") != want+" links" && strings.Join(ids, " ") != want {
		t.Errorf("the verdict's reply has blocks %v, want the repeat right under the verdict", ids)
	}
	if !strings.HasPrefix(line, ":repeat: Same verdict as 2 days ago on this instance (<https://ac.example/runs/r0?") ||
		!strings.Contains(line, "|run r0>): <https://ac.example/runs/r0?") || !strings.Contains(line, "#verdict|evidence>") ||
		!strings.Contains(line, " · <https://ac.example/artifacts/r0/profile-report.json?sig=x|profile-report.json>") {
		t.Errorf("the repeat says %q, want the earlier run's page, its evidence and its report", line)
	}
	page, _, _ := strings.Cut(line[strings.Index(line, "<")+1:], "|")
	u, err := url.Parse(html.UnescapeString(page)) // Slack's markup escapes the & of the query
	if err != nil || signer.VerifyPage("r0", u.Query(), time.Now()) != nil {
		t.Errorf("the earlier run's page link %q does not open its page (%v)", page, err)
	}
	if ids, _ := blockIDs(t, replies[1].Blocks); strings.Contains(strings.Join(ids, " "), "repeat") {
		t.Errorf("a reply without a verdict has blocks %v, want no repeat", ids)
	}
}

// blockIDs are a message's block ids in order, and the text of its
// "repeat" block.
func blockIDs(t *testing.T, raw json.RawMessage) ([]string, string) {
	t.Helper()
	var blocks []struct {
		BlockID  string `json:"block_id"`
		Elements []struct {
			Text string `json:"text"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var line string
	for _, b := range blocks {
		ids = append(ids, b.BlockID)
		if b.BlockID == "repeat" && len(b.Elements) > 0 {
			line = b.Elements[0].Text
		}
	}
	return ids, line
}
