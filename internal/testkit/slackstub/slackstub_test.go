package slackstub

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

var fixed = time.Unix(1700000000, 0)

func client(s *Server, token string) *slack.Client {
	return slack.New(token, slack.OptionAPIURL(s.URL()))
}

// apiErr returns the Slack error code carried by err, or "" if it carries none.
func apiErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

func post(t *testing.T, c *slack.Client, ch string, opts ...slack.MsgOption) string {
	t.Helper()
	_, ts, err := c.PostMessageContext(context.Background(), ch, opts...)
	if err != nil {
		t.Fatalf("post to %s: %v", ch, err)
	}
	return ts
}

func TestParentAndRepliesInOneSecondGetDistinctIncreasingTS(t *testing.T) {
	s := New(t, WithClock(func() time.Time { return fixed }))
	c := client(s, "xoxb-test")
	ch, parent, err := c.PostMessageContext(context.Background(), "#alerts", slack.MsgOptionText("run started", false))
	if err != nil || ch != "C0001" {
		t.Fatalf("post by name: channel %q, err %v; want C0001", ch, err)
	}
	tss := []string{parent}
	for i := 0; i < 3; i++ {
		tss = append(tss, post(t, c, "C0001", slack.MsgOptionText("step", false), slack.MsgOptionTS(parent)))
	}
	format := regexp.MustCompile(`^1700000000\.\d{6}$`)
	for i, ts := range tss {
		if !format.MatchString(ts) {
			t.Errorf("ts %q is not seconds.microseconds", ts)
		}
		if i > 0 && ts <= tss[i-1] {
			t.Errorf("ts %q not after %q", ts, tss[i-1])
		}
	}
	msgs := s.Messages("C0001")
	if len(msgs) != 1 || len(msgs[0].Replies) != 3 || msgs[0].Replies[2].TS != tss[3] || msgs[0].Replies[0].ThreadTS != parent {
		t.Fatalf("conversation:\n%s", s.Dump())
	}
}

func TestPostIsStrict(t *testing.T) {
	s := New(t)
	c := client(s, "xoxb-test")
	parent := post(t, c, "C0001", slack.MsgOptionText("parent", false))
	reply := post(t, c, "C0001", slack.MsgOptionText("reply", false), slack.MsgOptionTS(parent))
	text := func(s string) slack.MsgOption { return slack.MsgOptionText(s, false) }
	header := func(s string) slack.Block {
		return slack.NewHeaderBlock(slack.NewTextBlockObject("plain_text", s, false, false))
	}
	section := func(s string) slack.Block {
		return slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", s, false, false), nil, nil)
	}
	many := make([]slack.Block, 51)
	for i := range many {
		many[i] = slack.NewDividerBlock()
	}
	for _, tc := range []struct {
		name, channel, want string
		opts                []slack.MsgOption
	}{
		{"unknown thread", "C0001", "invalid_thread_ts", []slack.MsgOption{text("x"), slack.MsgOptionTS("1600000000.000001")}},
		{"reply to a reply", "C0001", "invalid_thread_ts", []slack.MsgOption{text("x"), slack.MsgOptionTS(reply)}},
		{"unknown channel", "C9999", "channel_not_found", []slack.MsgOption{text("x")}},
		{"no text", "C0001", "no_text", nil},
		{"text too long", "C0001", "msg_too_long", []slack.MsgOption{text(strings.Repeat("a", 40001))}},
		{"header too long", "C0001", "invalid_blocks", []slack.MsgOption{slack.MsgOptionBlocks(header(strings.Repeat("h", 151)))}},
		{"section too long", "C0001", "invalid_blocks", []slack.MsgOption{slack.MsgOptionBlocks(section(strings.Repeat("s", 3001)))}},
		{"51 blocks", "C0001", "invalid_blocks", []slack.MsgOption{text("x"), slack.MsgOptionBlocks(many...)}},
		{"metadata without event_type", "C0001", "invalid_metadata_schema", []slack.MsgOption{text("x"), slack.MsgOptionMetadata(slack.SlackMetadata{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.PostMessageContext(context.Background(), tc.channel, tc.opts...)
			if apiErr(err) != tc.want {
				t.Errorf("err = %v, want %s", err, tc.want)
			}
		})
	}
	ok := post(t, c, "C0001", text("fallback"), slack.MsgOptionBlocks(header(strings.Repeat("h", 150)), section(strings.Repeat("s", 3000))))
	if got := s.Messages("alerts"); len(got) != 2 || got[1].TS != ok || got[1].Blocks == nil || len(got[0].Replies) != 1 {
		t.Fatalf("only the valid posts should be recorded:\n%s", s.Dump())
	}
}

func TestUpdate(t *testing.T) {
	s := New(t, WithOtherBot("xoxb-other"))
	c, other := client(s, "xoxb-test"), client(s, "xoxb-other")
	ctx := context.Background()
	md := slack.SlackMetadata{EventType: "autocapture_run", EventPayload: map[string]any{"run": "r1"}}
	ts := post(t, c, "C0001", slack.MsgOptionText("running", false),
		slack.MsgOptionBlocks(slack.NewDividerBlock()), slack.MsgOptionMetadata(md))
	theirs := post(t, other, "C0001", slack.MsgOptionText("not yours", false))

	if _, _, _, err := c.UpdateMessageContext(ctx, "C0001", theirs, slack.MsgOptionText("mine now", false)); apiErr(err) != "cant_update_message" {
		t.Errorf("update of another bot's message: %v, want cant_update_message", err)
	}
	if _, _, _, err := c.UpdateMessageContext(ctx, "#alerts", ts, slack.MsgOptionText("x", false)); apiErr(err) != "channel_not_found" {
		t.Errorf("update by channel name: %v, want channel_not_found", err)
	}
	if _, _, _, err := c.UpdateMessageContext(ctx, "C0001", "1600000000.000001", slack.MsgOptionText("x", false)); apiErr(err) != "message_not_found" {
		t.Errorf("update of unknown ts: %v, want message_not_found", err)
	}
	if _, _, _, err := c.UpdateMessageContext(ctx, "C0001", ts, slack.MsgOptionText("done", false)); err != nil {
		t.Fatal(err)
	}
	m := s.Messages("C0001")[0]
	if m.Text != "done" || m.Blocks != nil || m.Metadata == nil || m.Metadata.EventPayload["run"] != "r1" || len(m.Revisions) != 2 {
		t.Errorf("text-only update must drop blocks and keep metadata: %+v", m)
	}
	if _, _, _, err := c.UpdateMessageContext(ctx, "C0001", ts, slack.MsgOptionText("done", false), slack.MsgOptionMetadata(slack.SlackMetadata{})); err != nil {
		t.Fatal(err)
	}
	if m := s.Messages("C0001")[0]; m.Metadata != nil || s.Messages("C0001")[1].Text != "not yours" {
		t.Errorf("empty metadata must remove it:\n%s", s.Dump())
	}
}

func TestUploadAttachesFileInThread(t *testing.T) {
	s := New(t)
	c := client(s, "xoxb-test")
	parent := post(t, c, "C0001", slack.MsgOptionText("run", false))
	body := "goroutine profile\n"
	f, err := c.UploadFileContext(context.Background(), slack.UploadFileParameters{
		Filename: "profile.txt", Title: "CPU profile", FileSize: len(body), Reader: strings.NewReader(body),
		Channel: "C0001", ThreadTimestamp: parent,
	})
	if err != nil {
		t.Fatal(err)
	}
	replies := s.Messages("C0001")[0].Replies
	if len(replies) != 1 || len(replies[0].Files) != 1 || replies[0].Files[0].ID != f.ID ||
		string(replies[0].Files[0].Content) != body || replies[0].Files[0].Title != "CPU profile" {
		t.Fatalf("file not in thread:\n%s", s.Dump())
	}
	_, err = c.UploadFileContext(context.Background(), slack.UploadFileParameters{
		Filename: "short.txt", FileSize: 100, Reader: strings.NewReader("x"), Channel: "C0001",
	})
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != 400 {
		t.Errorf("upload shorter than announced: %v, want HTTP 400", err)
	}
	_, err = c.CompleteUploadExternalContext(context.Background(), slack.CompleteUploadExternalParameters{
		Files: []slack.FileSummary{{ID: f.ID}}, Channel: "C0001"})
	if apiErr(err) != "file_not_found" {
		t.Errorf("completing a file twice: %v, want file_not_found", err)
	}
}

func TestHistoryAndRepliesWithMetadata(t *testing.T) {
	s := New(t)
	c := client(s, "xoxb-test")
	ctx := context.Background()
	var tops []string
	for i := 0; i < 3; i++ {
		tops = append(tops, post(t, c, "C0001", slack.MsgOptionText("run", false),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "autocapture_run", EventPayload: map[string]any{"i": i}})))
	}
	r1 := post(t, c, "C0001", slack.MsgOptionText("reply 1", false), slack.MsgOptionTS(tops[0]))
	r2 := post(t, c, "C0001", slack.MsgOptionText("reply 2", false), slack.MsgOptionTS(tops[0]))

	h, err := c.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C0001", Limit: 2, IncludeAllMetadata: true})
	if err != nil || len(h.Messages) != 2 || !h.HasMore || h.Messages[0].Timestamp != tops[2] || h.Messages[0].Metadata.EventType != "autocapture_run" {
		t.Fatalf("history page 1: %+v, %v", h, err)
	}
	h2, err := c.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C0001", Cursor: h.ResponseMetaData.NextCursor})
	if err != nil || len(h2.Messages) != 1 || h2.HasMore || h2.Messages[0].Timestamp != tops[0] || h2.Messages[0].ReplyCount != 2 {
		t.Fatalf("history page 2: %+v, %v", h2, err)
	}
	if h2.Messages[0].Metadata.EventType != "" {
		t.Errorf("metadata returned without include_all_metadata")
	}
	msgs, more, _, err := c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0001", Timestamp: tops[0], IncludeAllMetadata: true})
	if err != nil || more || len(msgs) != 3 || msgs[0].Timestamp != tops[0] || msgs[1].Timestamp != r1 || msgs[2].Timestamp != r2 ||
		msgs[0].Metadata.EventPayload["i"] != float64(0) {
		t.Fatalf("replies: %+v, %v", msgs, err)
	}
	page, more, next, err := c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0001", Timestamp: tops[0], Limit: 2})
	if err != nil || !more || len(page) != 2 || page[1].Timestamp != r1 {
		t.Fatalf("replies page 1: %+v, %v", page, err)
	}
	page, more, _, err = c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0001", Timestamp: tops[0], Limit: 2, Cursor: next})
	if err != nil || more || len(page) != 2 || page[0].Timestamp != tops[0] || page[1].Timestamp != r2 {
		t.Fatalf("replies page 2 (parent first again): %+v, %v", page, err)
	}
	old, err := c.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C0001", Latest: tops[1], Inclusive: true})
	if err != nil || len(old.Messages) != 2 {
		t.Errorf("history up to %s inclusive: %+v, %v", tops[1], old, err)
	}
	if _, _, _, err := c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C0001", Timestamp: "1600000000.000001"}); apiErr(err) != "thread_not_found" {
		t.Errorf("replies of unknown ts: %v, want thread_not_found", err)
	}
}

func TestRateLimitAndServerErrors(t *testing.T) {
	s := New(t)
	c := client(s, "xoxb-test")
	s.Fail("chat.postMessage", RateLimited(7).Times(1))
	s.Fail("chat.postMessage", ServerError(503).Skip(1).Times(1))
	_, _, err := c.PostMessageContext(context.Background(), "C0001", slack.MsgOptionText("a", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("first post: %v, want *slack.RateLimitedError{7s}", err)
	}
	_, _, err = c.PostMessageContext(context.Background(), "C0001", slack.MsgOptionText("b", false))
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != 503 {
		t.Fatalf("second post: %v, want HTTP 503", err)
	}
	post(t, c, "C0001", slack.MsgOptionText("c", false))
	if got := s.Messages("C0001"); len(got) != 1 || got[0].Text != "c" {
		t.Fatalf("failed posts must not be applied:\n%s", s.Dump())
	}
	var outcomes []Outcome
	for _, call := range s.Calls() {
		outcomes = append(outcomes, call.Outcome)
	}
	if want := []Outcome{OutcomeRateLimited, OutcomeServerError, OutcomeOK}; !equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	if n := s.MaxInWindow("chat.postMessage", "C0001", time.Minute); n != 3 {
		t.Errorf("MaxInWindow = %d, want 3", n)
	}
}

func TestFractionIsSeeded(t *testing.T) {
	count := func() int {
		s := New(t)
		s.Fail("auth.test", RateLimited(1).Fraction(0.5, 42))
		c := client(s, "xoxb-test")
		n := 0
		for i := 0; i < 40; i++ {
			if _, err := c.AuthTestContext(context.Background()); err != nil {
				n++
			}
		}
		return n
	}
	a, b := count(), count()
	if a != b || a < 5 || a > 35 {
		t.Errorf("429s in 40 calls: %d then %d, want equal and near 20", a, b)
	}
}

func TestDropAfterApplyIsRecordedYetFails(t *testing.T) {
	s := New(t)
	c := client(s, "xoxb-test")
	s.Fail("chat.postMessage", DropAfterApply().Times(1))
	s.Fail("chat.postMessage", Drop().Times(1))
	for i, applied := range []int{1, 1} {
		if _, _, err := c.PostMessageContext(context.Background(), "C0001", slack.MsgOptionText("uncertain", false)); err == nil {
			t.Fatalf("post %d: no error from a dropped connection", i)
		}
		if got := len(s.Messages("C0001")); got != applied {
			t.Fatalf("post %d: %d messages recorded, want %d", i, got, applied)
		}
	}
	calls := s.Calls()
	if calls[0].Outcome != OutcomeDroppedLate || calls[1].Outcome != OutcomeDropped {
		t.Errorf("calls: %+v", calls)
	}
}

func TestTokens(t *testing.T) {
	s := New(t)
	for _, tc := range []struct{ token, want string }{{"", "not_authed"}, {"xoxb-wrong", "invalid_auth"}, {"xoxb-test", ""}} {
		_, err := client(s, tc.token).AuthTestContext(context.Background())
		if apiErr(err) != tc.want {
			t.Errorf("token %q: %v, want %q", tc.token, err, tc.want)
		}
		_, _, err = client(s, tc.token).PostMessageContext(context.Background(), "C0001", slack.MsgOptionText("x", false))
		if apiErr(err) != tc.want {
			t.Errorf("post with token %q: %v, want %q", tc.token, err, tc.want)
		}
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
