package slack

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"go.uber.org/zap"
)

// parentButtons returns the URL of each link button of a parent, by its text.
func parentButtons(t *testing.T, m slackstub.Message) map[string]string {
	t.Helper()
	var blocks []struct {
		BlockID  string          `json:"block_id"`
		Elements json.RawMessage `json:"elements"`
	}
	if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
		t.Fatalf("parent blocks: %v", err)
	}
	out := map[string]string{}
	for _, b := range blocks {
		if b.BlockID != "links" {
			continue
		}
		var els []struct {
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
			URL string `json:"url"`
		}
		if err := json.Unmarshal(b.Elements, &els); err != nil {
			t.Fatalf("link buttons: %v", err)
		}
		for _, e := range els {
			out[e.Text.Text] = e.URL
		}
	}
	return out
}

// TestParentLinksRunPage: with web.external_url the parent carries a "Run
// page" button to <external_url>/runs/<id> (the id path-escaped), besides the
// API's; without it, neither.
func TestParentLinksRunPage(t *testing.T) {
	stub, n, _ := setup(t)
	run := testRun()
	run.ID = "r1/x y"
	if _, err := n.Open(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	msgs := stub.Messages("C0AUTOCAP")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want the parent", len(msgs))
	}
	b := parentButtons(t, msgs[0])
	if got, want := b["Run page"], "http://autocapture:9095/runs/r1%2Fx%20y"; got != want {
		t.Fatalf("Run page button %q, want %q (buttons %v)", got, want, b)
	}
	if got, want := b["Run"], "http://autocapture:9095/api/v1/runs/r1%2Fx%20y"; got != want {
		t.Fatalf("Run (API) button %q, want %q", got, want)
	}

	stub2 := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	cfg := config.Default().Notify.Slack
	cfg.Enabled, cfg.Token, cfg.Channel, cfg.APIURL = true, config.Secret(canary), "C0AUTOCAP", stub2.URL()
	cfg.Pace = config.Pace{PerSecond: 1000, Burst: 10}
	n2, err := New(cfg, memStore{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Open(context.Background(), testRun()); err != nil {
		t.Fatal(err)
	}
	b = parentButtons(t, stub2.Messages("C0AUTOCAP")[0])
	if _, ok := b["Run page"]; ok {
		t.Fatalf("a Run page button without web.external_url: %v", b)
	}
	if len(b) == 0 {
		t.Fatalf("no link buttons at all: the test reads the wrong block")
	}
}
