package slack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/notify"
)

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
