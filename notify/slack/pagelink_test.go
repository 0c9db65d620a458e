package slack

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/links"
	"github.com/autocapture/autocapture/notify"
)

// TestRunPageLinkIsSignedAtDelivery: with WithRunPageLinks the parent's "Run
// page" button carries a page token for exactly its run, valid the TTL from
// the delivery; every edit of the parent (from the run, or from the parent's
// metadata read back) carries a fresh one; the metadata keeps the link
// without its token.
func TestRunPageLinkIsSignedAtDelivery(t *testing.T) {
	const ttl = 30 * 24 * time.Hour
	n, stub, signer := signingNotifier(t, ttl)
	clock := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	n.now = func() time.Time { return clock }
	ctx := context.Background()
	run := testRun()
	th, err := n.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}

	// check reads the parent's Run page button: the run's page with a token
	// that opens it until exp and no other run.
	check := func(when string, exp time.Time) {
		t.Helper()
		parent := stub.Messages("C0AUTOCAP")[0]
		raw := parentButtons(t, parent)[RunPageLink]
		u, err := url.Parse(raw)
		if err != nil || u.Scheme+"://"+u.Host+u.Path != "https://ac.example/runs/r1" {
			t.Fatalf("%s: Run page button %q, want https://ac.example/runs/r1?…", when, raw)
		}
		q := u.Query()
		if err := signer.VerifyPage("r1", q, exp.Add(-time.Second)); err != nil {
			t.Fatalf("%s: the link does not open its run's page: %v", when, err)
		}
		if err := signer.VerifyPage("r1", q, exp); err == nil {
			t.Fatalf("%s: the link outlives %v", when, exp)
		}
		if err := signer.VerifyPage("r2", q, clock); err == nil {
			t.Fatalf("%s: the link opens another run", when)
		}
		for k, v := range parent.Metadata.EventPayload {
			if s, _ := v.(string); strings.Contains(s, links.ParamSignature+"=") {
				t.Fatalf("%s: the metadata keeps a link token: %s = %q", when, k, s)
			}
		}
		if s, _ := parent.Metadata.EventPayload["link1"].(string); s != RunPageLink+"\nhttps://ac.example/runs/r1" {
			t.Fatalf("%s: the metadata's Run page link %q", when, s)
		}
	}
	check("posted", clock.Add(ttl))

	// An edit from the run, a day later: a fresh link.
	clock = clock.Add(24 * time.Hour)
	if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseFinished, Status: "succeeded", Run: &run}); err != nil {
		t.Fatal(err)
	}
	check("edited from the run", clock.Add(ttl))

	// An edit from the parent's metadata alone, a day later again.
	clock = clock.Add(24 * time.Hour)
	at := clock
	if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseResolved, Status: "succeeded", ResolvedAt: &at}); err != nil {
		t.Fatal(err)
	}
	check("edited from the metadata", clock.Add(ttl))
}

// signingNotifier is a notifier on the stand-in (channel C0AUTOCAP) that
// links run pages under https://ac.example/ with page tokens valid ttl,
// made by the signer it returns.
func signingNotifier(t *testing.T, ttl time.Duration) (*Notifier, *slackstub.Server, *links.Signer) {
	t.Helper()
	signer, err := links.NewSigner([]byte("slack-page-link-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	cfg := config.Default().Notify.Slack
	cfg.Enabled, cfg.Token, cfg.Channel, cfg.APIURL = true, config.Secret(canary), "C0AUTOCAP", stub.URL()
	cfg.Pace = config.Pace{PerSecond: 1000, Burst: 10}
	n, err := New(cfg, memStore{}, zap.NewNop(), WithExternalURL("https://ac.example/"), WithRunPageLinks(signer, ttl))
	if err != nil {
		t.Fatal(err)
	}
	return n, stub, signer
}
