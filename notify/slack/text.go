package slack

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/slack-go/slack"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/vocab"
)

// Slack's limits (docs.slack.dev, Block Kit reference), with room to spare
// where Slack counts differently from runes.
const (
	maxFallback   = 3000 // text: Slack truncates past 40,000; a notification needs far less
	maxSection    = 3000 // a section's text
	maxField      = 2000 // a section field, a context element
	maxHeader     = 150  // a header's plain text
	maxButtonText = 75   // a button's label
	maxButtons    = 25   // elements in an actions block
	maxURL        = 3000 // a button's url
)

// esc is the one way text reaches Slack's mrkdwn and fallback text: the
// three characters Slack reserves escaped, mentions broken, control and
// invisible characters shown (untrusted.Mrkdwn).
func esc(s string) string { return untrusted.Mrkdwn(s) }

// code is s in a `code span` it cannot close.
func code(s string) string { return "`" + untrusted.Code(s) + "`" }

// escURL keeps a URL inside Slack's <url|name> link syntax.
func escURL(u string) string { return untrusted.URL(u) }

// fmtDur prints a duration as a person says it: 132ms, 6.2s, 14m, 1h2m.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		if s := d % time.Minute; s != 0 {
			return fmt.Sprintf("%dm%ds", d/time.Minute, s/time.Second)
		}
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%dm", d/time.Hour, (d%time.Hour)/time.Minute)
}

// statusEmoji marks a step's or a run's status.
func statusEmoji(status vocab.Status) string {
	switch status {
	case vocab.StatusSucceeded:
		return ":white_check_mark:"
	case vocab.StatusFailed:
		return ":x:"
	case vocab.StatusSkipped:
		return ":fast_forward:"
	case vocab.StatusNotConfigured:
		return ":white_circle:"
	case vocab.StatusCancelled:
		return ":no_entry_sign:"
	case vocab.StatusPartial:
		return ":warning:"
	}
	return ":grey_question:"
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

// plainText is Slack's plain_text: shown as written, so only what would act
// on the reader's screen is escaped.
func plainText(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, untrusted.Text(s), true, false)
}

func section(id, s string) *slack.SectionBlock {
	return slack.NewSectionBlock(mrkdwn(s), nil, nil, slack.SectionBlockOptionBlockID(id))
}

func header(id, s string) *slack.HeaderBlock {
	return slack.NewHeaderBlock(plainText(clip.Runes(untrusted.Text(s), maxHeader)), slack.HeaderBlockOptionBlockID(id))
}

// webURL says whether Slack can open u: http or https with a host.
func webURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != ""
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// safeName makes a step id usable as a file name.
func safeName(s string) string {
	if s = unsafeName.ReplaceAllString(s, "_"); s == "" {
		return "step"
	}
	return s
}
