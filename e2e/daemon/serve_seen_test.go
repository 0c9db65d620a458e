package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestServeSeenBefore: the second run of an alert on the same instance says
// so on its parent ("2nd time … on this instance"), linking the first run's
// page, and on its run page, and keeps saying it once the parent is edited
// with the run's outcome; the first run's parent says nothing of it.
func TestServeSeenBefore(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	target := httptest.NewServer(&slowTarget{hits: map[string]int{}, slowHit: make(chan struct{}, 1)})
	defer target.Close()
	o := &daemonOpts{Token: "s", Port: testenv.FreePort(t), Playbooks: silencePlaybook("E2ESeen", target.URL), Notify: slackNotify(stub)}
	o.Web = fmt.Sprintf("  external_url: http://127.0.0.1:%d\n", o.Port)
	d := startDaemon(t, o)
	var ids []string
	for i, fp := range []string{"5ee0000000000001", "5ee0000000000002"} {
		code, b := d.post(t, webhookBody("E2ESeen", fp, "firing", time.Now().Add(-time.Minute)))
		if ids = append(ids, runID(b)); code != 200 || ids[i] == "" {
			t.Fatalf("webhook %d: %d %s", i, code, b)
		}
		time.Sleep(20 * time.Millisecond) // the second run is created after the first
	}
	seen := func(m slackstub.Message) string { return contextText(m, "seen") }
	waitFor(t, 30*time.Second, "both parents, edited with their outcome", func() bool {
		closed := 0
		for _, m := range stub.Messages(slackChannel) {
			if m.Metadata != nil && m.Metadata.EventPayload["status"] == "succeeded" {
				closed++
			}
		}
		return closed == 2 // the line must survive the edit
	})
	first, second := threadOf(t, stub, ids[0]), threadOf(t, stub, ids[1])
	if s := seen(first); s != "" {
		t.Errorf("the first run's parent says %q, want no seen-before line", s)
	}
	if s := seen(second); !strings.Contains(s, "2nd time since") || !strings.Contains(s, "on this instance") ||
		!strings.Contains(s, "/runs/"+ids[0]+"|") {
		t.Errorf("the second run's parent says %q, want the 2nd time on this instance, linking run %s", s, ids[0])
	}
	req, _ := http.NewRequest("GET", d.URL+"/runs/"+ids[1], nil)
	if code, page := d.do(t, req); code != 200 || !strings.Contains(string(page), `id="seen-before"`) ||
		!strings.Contains(string(page), `href="/runs/`+ids[0]+`"`) {
		t.Errorf("run page: %d, want the seen-before line linking run %s", code, ids[0])
	}
}

// contextText is the text of a message's context block blockID ("" if none).
func contextText(m slackstub.Message, blockID string) string {
	var blocks []struct {
		BlockID  string `json:"block_id"`
		Elements []struct {
			Text string `json:"text"`
		} `json:"elements"`
	}
	_ = json.Unmarshal(m.Blocks, &blocks)
	var out []string
	for _, b := range blocks {
		if b.BlockID == blockID {
			for _, e := range b.Elements {
				out = append(out, e.Text)
			}
		}
	}
	return strings.Join(out, " ")
}
