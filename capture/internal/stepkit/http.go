package stepkit

import (
	"net"
	"net/url"
	"strings"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/vocab"
)

// HTTPStatusError classifies a non-2xx answer from an upstream.
func HTTPStatusError(what string, status int, body string) error {
	r := vocab.ReasonUpstream5xx
	if status < 500 {
		r = vocab.ReasonUpstream4xx
	}
	if status == 503 || status == 502 || status == 504 {
		r = vocab.ReasonUnavailable
	}
	return vocab.Errorf(r, "%s: HTTP %d: %s", what, status, clip.Line(body, 200))
}

// MaxErrorText bounds an error kept in a finding: it stays readable in a thread.
const MaxErrorText = 300

// RedactURL hides credentials in a configured URL before it reaches a message.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable url>"
	}
	return u.Redacted()
}

// MaxScrapeBytes caps one scrape; vLLM's exposition is tens of kilobytes.
const MaxScrapeBytes = 16 << 20

// ValidHostPort accepts host:port with a non-empty host and a numeric port.
func ValidHostPort(s string) bool {
	h, p, err := net.SplitHostPort(s)
	return err == nil && h != "" && p != "" && !strings.ContainsAny(s, "/?#@")
}
