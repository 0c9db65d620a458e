package capture

import (
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
