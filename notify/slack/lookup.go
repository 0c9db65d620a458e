package slack

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/notify"
)

// Lookups bound how far a retry reads back: a parent is posted shortly after
// its alert started, so history from a little before then (and at most a day
// back) holds it; a thread is read to its end.
const (
	lookbackMax  = 24 * time.Hour
	clockSkew    = 5 * time.Minute
	maxPages     = 20
	historyLimit = 200
)

var channelID = regexp.MustCompile(`^[CGD][A-Z0-9]{6,}$`)

// paceKey is the channel a bucket is kept for: its id once known.
func (n *Notifier) paceKey(ch string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[ch]; ok {
		return id
	}
	return ch
}

// learn remembers a channel name's id from a post's answer.
func (n *Notifier) learn(name, id string) {
	if name == "" || id == "" || name == id {
		return
	}
	n.mu.Lock()
	n.ids[name] = id
	n.mu.Unlock()
}

// resolve returns ch's id: history and replies take only ids. A name not yet
// learned from a post is looked up with conversations.list.
func (n *Notifier) resolve(ctx context.Context, ch string) (string, error) {
	if channelID.MatchString(ch) {
		return ch, nil
	}
	n.mu.Lock()
	id, ok := n.ids[ch]
	n.mu.Unlock()
	if ok {
		return id, nil
	}
	name := strings.TrimPrefix(ch, "#")
	params := &slack.GetConversationsParameters{Types: []string{"public_channel", "private_channel"}, ExcludeArchived: true, Limit: 1000}
	for range maxPages {
		chans, cursor, err := n.api.GetConversationsContext(ctx, params)
		if err != nil {
			return "", n.fail(err, "conversations.list: find the id of %s", ch)
		}
		for _, c := range chans {
			if c.Name == name {
				n.learn(ch, c.ID)
				return c.ID, nil
			}
		}
		if cursor == "" {
			break
		}
		params.Cursor = cursor
	}
	return "", n.fail(errNoChannel, "find the id of %s", ch)
}

type lookupError string

func (e lookupError) Error() string { return string(e) }

const errNoChannel = lookupError("channel_not_found: no channel of that name is visible to the bot")

// findParent looks for the run's parent in recent history (Open with Retry).
func (n *Notifier) findParent(ctx context.Context, ch string, run notify.RunInfo) (notify.Thread, bool, error) {
	id, err := n.resolve(ctx, ch)
	if err != nil {
		return notify.Thread{}, false, err
	}
	oldest := n.now().Add(-lookbackMax)
	if s := run.Alert.StartsAt.Add(-clockSkew); s.After(oldest) {
		oldest = s
	}
	params := &slack.GetConversationHistoryParameters{ChannelID: id, Oldest: slackTS(oldest),
		Limit: historyLimit, IncludeAllMetadata: true}
	for range maxPages {
		resp, err := n.api.GetConversationHistoryContext(ctx, params)
		if err != nil {
			return notify.Thread{}, false, n.fail(err, "conversations.history: look for the parent of run %s in %s", run.ID, ch)
		}
		for _, m := range resp.Messages {
			if matches(m, run.ID, notify.KeyOpen) {
				n.learn(ch, id)
				return notify.Thread{Channel: id, TS: m.Timestamp}, true, nil
			}
		}
		if !resp.HasMore || resp.ResponseMetaData.NextCursor == "" {
			break
		}
		params.Cursor = resp.ResponseMetaData.NextCursor
	}
	return notify.Thread{}, false, nil
}

// parentState reads the parent's metadata back (Close re-renders from it).
func (n *Notifier) parentState(ctx context.Context, t notify.Thread, runID string) (Parent, bool, error) {
	resp, err := n.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: t.Channel,
		Latest: t.TS, Oldest: t.TS, Inclusive: true, Limit: 1, IncludeAllMetadata: true})
	if err != nil {
		return Parent{}, false, n.fail(err, "conversations.history: read the parent %s of run %s in %s", t.TS, runID, t.Channel)
	}
	for _, m := range resp.Messages {
		if m.Timestamp == t.TS && m.Metadata.EventType == EventType {
			return parentFromPayload(runID, m.Metadata.EventPayload), true, nil
		}
	}
	return Parent{RunID: runID}, false, nil
}

// threadState is what a retried reply finds in the thread: whether the reply
// with its key is there, and the titles of the files already shared.
type threadState struct {
	found  bool
	titles map[string]bool
}

// findReply reads the thread for the reply with key (Reply or Close with Retry).
func (n *Notifier) findReply(ctx context.Context, t notify.Thread, runID, key string) (threadState, error) {
	st := threadState{titles: map[string]bool{}}
	params := &slack.GetConversationRepliesParameters{ChannelID: t.Channel, Timestamp: t.TS, Limit: historyLimit, IncludeAllMetadata: true}
	for range maxPages {
		msgs, more, cursor, err := n.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			return st, n.fail(err, "conversations.replies: look for %s of run %s in %s/%s", key, runID, t.Channel, t.TS)
		}
		for _, m := range msgs {
			if m.Timestamp != t.TS && matches(m, runID, key) {
				st.found = true
			}
			for _, f := range m.Files {
				st.titles[f.Title] = true
			}
		}
		if !more || cursor == "" {
			break
		}
		params.Cursor = cursor
	}
	return st, nil
}

// slackTS writes a time as Slack's ts ("1700000000.000000").
func slackTS(t time.Time) string {
	us := t.UnixMicro()
	return strconv.FormatInt(us/1e6, 10) + "." + leftPad(strconv.FormatInt(us%1e6, 10), 6)
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// scrubbed is an error whose text had the token and any URL query (an
// upload_url is presigned) taken out; it still unwraps to the cause, so
// errors.Is(err, context.Canceled) holds.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

var urlQuery = regexp.MustCompile(`(https?://[^\s?"']+)\?[^\s"']*`)

// scrub hides the token and URL queries in an error's text.
func (n *Notifier) scrub(err error) error {
	msg := err.Error()
	if n.token != "" {
		msg = strings.ReplaceAll(msg, n.token, "<secret>")
	}
	msg = urlQuery.ReplaceAllString(msg, "$1?<redacted>")
	return &scrubbed{msg: msg, err: err}
}

// fail wraps err with what was being done and where: a 429 becomes a
// *notify.RateLimitedError with Slack's Retry-After, so the outbox waits.
func (n *Notifier) fail(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	wrapped := n.scrub(fmt.Errorf("slack: %s: %w", what, err))
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &notify.RateLimitedError{RetryAfter: rl.RetryAfter, Err: wrapped}
	}
	return wrapped
}
