package daemon

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// TestServeThreadLinkOpensTheArtifact: the real binary, without
// web.external_url, says once at startup to set it, and links each artifact
// in the Slack thread to its own listen address; the link opens without API
// credentials and gives the bytes the step stored, while the route without the
// token asks for them.
func TestServeThreadLinkOpensTheArtifact(t *testing.T) {
	t.Parallel()
	stub := newSlack(t)
	body := `{"ok":true,"pad":"` + strings.Repeat("x", 3000) + `"}`
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer target.Close()
	pb := `playbooks:
  - name: links
    match:
      - alertname="E2ELinks"
    steps:
      - id: fetch
        http: {url: "` + target.URL + `/x"}
`
	d := startDaemon(t, &daemonOpts{Token: "links-token", Playbooks: pb, Notify: slackNotify(stub)})
	code, b := d.post(t, webhookBody("E2ELinks", "11nk511nk511nk50", "firing", time.Now().Add(-time.Minute)))
	id := runID(b)
	if code != 200 || id == "" {
		t.Fatalf("webhook: %d %s", code, b)
	}
	waitFor(t, 60*time.Second, "the run to finish", func() bool {
		r := d.run(t, id)
		return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning
	})
	run := d.run(t, id)
	if len(run.Steps) != 1 || len(run.Steps[0].Artifacts) == 0 {
		t.Fatalf("steps %+v", run.Steps)
	}
	art := run.Steps[0].Artifacts[0]
	linkRE := regexp.MustCompile(`<(http://127\.0\.0\.1:\d+/artifacts/[^|>]+)\|`)
	var link string
	waitFor(t, 60*time.Second, "the step's reply with its link", func() bool {
		for _, m := range stub.Messages(slackChannel) {
			for _, r := range m.Replies {
				var blocks any
				_ = json.Unmarshal(r.Blocks, &blocks)
				var s string
				for _, c := range linkRE.FindAllStringSubmatch(fmt.Sprint(blocks), -1) {
					s = strings.ReplaceAll(c[1], "&amp;", "&")
				}
				if s != "" {
					link = s
					return true
				}
			}
		}
		return false
	})
	if !strings.HasPrefix(link, d.URL+"/artifacts/"+id+"/"+art.Key+"?") {
		t.Fatalf("link %q, want it under %s for key %s", link, d.URL, art.Key)
	}
	res, err := http.Get(link) // no Authorization: the token is enough
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || sha256.Sum256(got) != sha256.Sum256([]byte(body)) {
		t.Fatalf("%d, %d bytes: %.200s", res.StatusCode, len(got), got)
	}
	res, err = http.Get(strings.SplitN(link, "?", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d, want 401", res.StatusCode)
	}
	logs := d.Proc.Logs()
	if n := strings.Count(logs, "web.external_url is not set"); n != 1 {
		t.Fatalf("%d warnings about web.external_url, want 1", n)
	}
	if strings.Contains(logs, "links-token") || strings.Contains(logs, "xoxb-test") {
		t.Fatal("a secret is in the daemon's log")
	}
}
