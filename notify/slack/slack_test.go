package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/slackstub"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

const canary = "xoxb-canary-7f3a9c"

// memStore is an ArtifactReader over a map.
type memStore map[string][]byte

func (m memStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	b, ok := m[key]
	if !ok {
		return nil, fmt.Errorf("%s: not found", key)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

var png = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 500)...)

// setup starts the stub with the canary token and a notifier on it whose logs
// are kept; pacing is fast so tests do not wait on it.
func setup(t *testing.T, mod ...func(*config.Slack)) (*slackstub.Server, *Notifier, *observer.ObservedLogs) {
	t.Helper()
	stub := slackstub.New(t, slackstub.WithToken(canary), slackstub.WithChannel("C0AUTOCAP", "alerts"))
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := config.Default().Notify.Slack
	cfg.Enabled, cfg.Token, cfg.Channel, cfg.APIURL = true, config.Secret(canary), "C0AUTOCAP", stub.URL()
	cfg.Pace = config.Pace{PerSecond: 1000, Burst: 10}
	for _, f := range mod {
		f(&cfg)
	}
	n, err := New(cfg, memStore{"runs/r1/kv_chart/chart.png": png}, zap.New(core), WithExternalURL("http://autocapture:9095/"))
	if err != nil {
		t.Fatal(err)
	}
	return stub, n, logs
}

func meta(m slackstub.Message) (string, string) {
	if m.Metadata == nil {
		return "", ""
	}
	run, _ := m.Metadata.EventPayload["run_id"].(string)
	key, _ := m.Metadata.EventPayload["key"].(string)
	return run, key
}

// TestThreadInOrder: the parent, then each step's reply in order in its
// thread with its key, the chart uploaded into the thread, then the parent
// led by the verdict and closed, resolved.
func TestThreadInOrder(t *testing.T) {
	stub, n, _ := setup(t)
	ctx := context.Background()
	th, err := n.Open(ctx, testRun())
	if err != nil {
		t.Fatal(err)
	}
	if th.Channel != "C0AUTOCAP" || th.TS == "" {
		t.Fatalf("thread %+v", th)
	}
	chart := step("kv_chart", "chart", vocab.TierMetrics, "succeeded", "KV cache usage: 1 series, max 0.98 ratio")
	chart.Files = []notify.File{{Name: "chart.png", Key: "runs/r1/kv_chart/chart.png", ContentType: "image/png", Size: int64(len(png))}}
	skipped := step("profile", "profile", vocab.TierProfile, "skipped", "")
	steps := []notify.StepReport{step("snapshot", "prometheus", vocab.TierMetrics, "succeeded", "20 PromQL queries"),
		chart, step("triage", "triage", vocab.TierTriage, "succeeded", "kv-pressure: KV cache 98% full"), skipped}
	for _, r := range steps {
		if err := n.Reply(ctx, th, r); err != nil {
			t.Fatalf("reply %s: %v", r.StepID, err)
		}
	}
	resolved := at.Add(14 * time.Minute)
	for _, s := range []notify.Summary{
		{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: kvVe},
		{RunID: "r1", Key: notify.KeyCloseFinished, Status: "succeeded", Duration: 6 * time.Minute, Verdict: kvVe},
		{RunID: "r1", Key: notify.KeyCloseResolved, Status: "succeeded", ResolvedAt: &resolved},
	} {
		if err := n.Close(ctx, th, s); err != nil {
			t.Fatalf("close %s: %v", s.Key, err)
		}
	}
	msgs := stub.Messages("C0AUTOCAP")
	if len(msgs) != 1 {
		t.Fatalf("%d top-level messages, want 1 parent", len(msgs))
	}
	p := msgs[0]
	if run, key := meta(p); run != "r1" || key != notify.KeyOpen {
		t.Fatalf("parent metadata %v", p.Metadata)
	}
	if !strings.HasPrefix(p.Text, "kv-pressure — KV cache 98% full (threshold 95%). raise gpu_memory_utilization") {
		t.Fatalf("parent does not lead with the verdict: %q", p.Text)
	}
	if !strings.Contains(p.Text, "succeeded after 6m · resolved after 14m") || len(p.Revisions) != 4 {
		t.Fatalf("parent after %d revisions: %q", len(p.Revisions), p.Text)
	}
	var keys []string
	for _, r := range p.Replies {
		_, key := meta(r)
		if len(r.Files) > 0 {
			key = "file:" + r.Files[0].Name
			if !bytes.Equal(r.Files[0].Content, png) || r.Files[0].Title != "vllm-high-ttft/kv_chart · chart.png" {
				t.Fatalf("chart upload %+v", r.Files[0].Title)
			}
		}
		keys = append(keys, key)
	}
	want := "step/vllm-high-ttft/snapshot step/vllm-high-ttft/kv_chart file:chart.png step/vllm-high-ttft/triage close/finished close/resolved"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("replies\n got %s\nwant %s", got, want)
	}
}

// TestFeedbackButtonsOnlyWithInteractivity: the parent that shows a verdict
// carries the right/wrong buttons (accepted by the strict stand-in) only when
// a signing secret says Slack's clicks have somewhere to go.
func TestFeedbackButtonsOnlyWithInteractivity(t *testing.T) {
	for _, secret := range []string{"", "8f742231b10e8888abcd99yyyzzz85a5"} {
		t.Run("secret="+strconv.FormatBool(secret != ""), func(t *testing.T) {
			stub, n, logs := setup(t, func(c *config.Slack) { c.SigningSecret = config.Secret(secret) })
			ctx := context.Background()
			th, err := n.Open(ctx, testRun())
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Close(ctx, th, notify.Summary{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: kvVe}); err != nil {
				t.Fatal(err)
			}
			p := stub.Messages("C0AUTOCAP")[0]
			first, last := string(p.Revisions[0].Blocks), string(p.Blocks)
			if strings.Contains(first, ActionVerdictRight) {
				t.Errorf("the parent asks about a verdict before there is one: %s", first)
			}
			has := strings.Contains(last, `"action_id":"`+ActionVerdictRight+`"`) &&
				strings.Contains(last, `"action_id":"`+ActionVerdictWrong+`"`) && strings.Contains(last, `"value":"r1|kv-pressure"`)
			if has != (secret != "") {
				t.Errorf("buttons shown %v with signing secret %v: %s", has, secret != "", last)
			}
			if secret != "" {
				for _, e := range logs.All() {
					if strings.Contains(e.Message+fmt.Sprint(e.ContextMap()), secret) {
						t.Errorf("the signing secret is in a log line: %s", e.Message)
					}
				}
			}
		})
	}
}

// TestRetryAfterDropPostsNothingTwice: the post went through but its answer
// was lost; the retry reads the message back instead of posting again, for
// the parent, a reply and a reply's file.
func TestRetryAfterDropPostsNothingTwice(t *testing.T) {
	stub, n, _ := setup(t)
	ctx := context.Background()
	stub.Fail("chat.postMessage", slackstub.DropAfterApply().Times(1))
	run := testRun()
	if _, err := n.Open(ctx, run); err == nil {
		t.Fatal("open with a dropped answer returned no error")
	}
	run.Retry = true
	th, err := n.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	msgs := stub.Messages("C0AUTOCAP")
	if len(msgs) != 1 || msgs[0].TS != th.TS {
		t.Fatalf("%d parents (want 1 at %s)", len(msgs), th.TS)
	}
	chart := step("kv_chart", "chart", vocab.TierMetrics, "succeeded", "KV cache usage")
	chart.Files = []notify.File{{Name: "chart.png", Key: "runs/r1/kv_chart/chart.png"}}
	stub.Fail("chat.postMessage", slackstub.DropAfterApply().Times(1))
	if err := n.Reply(ctx, th, chart); err == nil {
		t.Fatal("reply with a dropped answer returned no error")
	}
	chart.Retry = true
	if err := n.Reply(ctx, th, chart); err != nil {
		t.Fatal(err)
	}
	stub.Fail("files.completeUploadExternal", slackstub.DropAfterApply().Times(1))
	if err := n.Reply(ctx, th, chart); err != nil {
		t.Fatalf("a retry of a complete reply: %v", err)
	}
	replies := stub.Messages("C0AUTOCAP")[0].Replies
	if len(replies) != 2 || len(replies[1].Files) != 1 {
		t.Fatalf("%d replies, want the reply and its chart once each:\n%s", len(replies), stub.Dump())
	}
}

// TestRateLimitedSurfacesRetryAfter: a 429 is a *notify.RateLimitedError with
// Slack's Retry-After; nothing was posted.
func TestRateLimitedSurfacesRetryAfter(t *testing.T) {
	stub, n, _ := setup(t)
	stub.Fail("chat.postMessage", slackstub.RateLimited(7).Times(1))
	_, err := n.Open(context.Background(), testRun())
	var rl *notify.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("err = %v, want a RateLimitedError after 7s", err)
	}
	if len(stub.Messages("C0AUTOCAP")) != 0 {
		t.Fatal("a rate-limited post was recorded")
	}
}

// TestTokenNeverInErrorsOrLogs: every failure the stub can inject, and an
// unknown channel, yields errors and log lines without the token.
func TestTokenNeverInErrorsOrLogs(t *testing.T) {
	stub, n, logs := setup(t)
	ctx := context.Background()
	var errs []error
	for _, f := range []slackstub.Fault{slackstub.ServerError(503), slackstub.Drop(), slackstub.RateLimited(1)} {
		stub.Fail("*", f.Times(1))
		_, err := n.Open(ctx, testRun())
		errs = append(errs, err)
	}
	run := testRun()
	run.Channel, run.Retry = "C0NOSUCH", true
	_, err := n.Open(ctx, run)
	errs = append(errs, err)
	th, err := n.Open(ctx, testRun())
	if err != nil {
		t.Fatal(err)
	}
	chart := step("kv_chart", "chart", vocab.TierMetrics, "succeeded", "KV cache usage")
	chart.Files = []notify.File{{Name: "chart.png", Key: "runs/r1/kv_chart/chart.png"}}
	stub.Fail("upload", slackstub.ServerError(500).Times(1))
	errs = append(errs, n.Reply(ctx, th, chart))
	for i, err := range errs {
		if err == nil {
			t.Fatalf("case %d: no error", i)
		}
		if strings.Contains(err.Error(), canary) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), canary) {
			t.Fatalf("the token is in an error: %v", err)
		}
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, canary) {
			t.Fatalf("the token is in a log line: %s", line)
		}
	}
}

// TestPacerStormGoesOutAtTheRate: ten posts to one channel at once take the
// burst immediately, then one per 1/rate; another channel has its own bucket.
func TestPacerStormGoesOutAtTheRate(t *testing.T) {
	p := newPacer(50, 3, time.Now)
	start := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.wait(context.Background(), "C1"); err != nil {
				t.Error(err)
			}
		}()
	}
	other := time.Now()
	if err := p.wait(context.Background(), "C2"); err != nil || time.Since(other) > 50*time.Millisecond {
		t.Fatalf("another channel waited %s (%v)", time.Since(other), err)
	}
	wg.Wait()
	// 3 at once, the other 7 one per 20 ms: at least 140 ms in all.
	if took := time.Since(start); took < 130*time.Millisecond {
		t.Fatalf("10 posts at 50/s with a burst of 3 went out in %s, want ≥ 140ms", took)
	}
}

// TestPacerParentGoesFirst: a thread's parent waiting behind queued replies
// gets the next token; the replies then go in their order.
func TestPacerParentGoesFirst(t *testing.T) {
	p := newPacer(5, 1, time.Now)                              // 200 ms between tokens: room for the parent to queue
	if err := p.wait(context.Background(), "C1"); err != nil { // the burst is spent
		t.Fatal(err)
	}
	order := make(chan string, 4)
	queued := func(n int) {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			p.mu.Lock()
			got := len(p.buckets["C1"].queue)
			p.mu.Unlock()
			if got >= n {
				return
			}
		}
		t.Fatalf("waiters never queued")
	}
	for i := range 3 {
		go func() {
			if err := p.wait(context.Background(), "C1"); err == nil {
				order <- fmt.Sprintf("reply%d", i)
			}
		}()
		queued(i + 1)
	}
	go func() {
		if err := p.waitParent(context.Background(), "C1"); err == nil {
			order <- "parent"
		}
	}()
	var got []string
	for range 4 {
		select {
		case s := <-order:
			got = append(got, s)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v got a token", got)
		}
	}
	if strings.Join(got, " ") != "parent reply0 reply1 reply2" {
		t.Fatalf("tokens went to %v, want the parent first, then the replies in order", got)
	}
}

// TestPacerWaitEndsWithTheContext: a wait longer than the caller's deadline
// ends with the context's cause and gives its token back.
func TestPacerWaitEndsWithTheContext(t *testing.T) {
	p := newPacer(0.01, 1, time.Now)
	if err := p.wait(context.Background(), "C1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.wait(ctx, "C1"); err == nil {
		t.Fatal("a 100 s wait returned before a 20 ms deadline without an error")
	}
}

// TestCloseFromTheRunReadsNothingBack: given the run (as the outbox gives
// it), Close re-renders the parent without conversations.history — a tier-3
// method, three times a run otherwise — and the parent says the same.
func TestCloseFromTheRunReadsNothingBack(t *testing.T) {
	stub, n, _ := setup(t)
	ctx := context.Background()
	run := testRun()
	th, err := n.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	resolved := at.Add(14 * time.Minute)
	for _, s := range []notify.Summary{
		{RunID: "r1", Key: notify.KeyCloseVerdict, Status: "running", Verdict: kvVe, Run: &run},
		{RunID: "r1", Key: notify.KeyCloseFinished, Status: "succeeded", Duration: 6 * time.Minute, Verdict: kvVe, Run: &run},
		{RunID: "r1", Key: notify.KeyCloseResolved, Status: "succeeded", Duration: 6 * time.Minute, Verdict: kvVe,
			ResolvedAt: &resolved, Run: &run},
	} {
		if err := n.Close(ctx, th, s); err != nil {
			t.Fatalf("close %s: %v", s.Key, err)
		}
	}
	for _, c := range stub.Calls() {
		if c.Method == "conversations.history" {
			t.Fatalf("Close read the channel back (%+v) though it was given the run", c)
		}
	}
	p := stub.Messages("C0AUTOCAP")[0]
	if !strings.HasPrefix(p.Text, "kv-pressure — KV cache 98% full (threshold 95%). raise gpu_memory_utilization") ||
		!strings.Contains(p.Text, "succeeded after 6m · resolved after 14m") || len(p.Revisions) != 4 {
		t.Fatalf("parent after %d revisions: %q", len(p.Revisions), p.Text)
	}
}
