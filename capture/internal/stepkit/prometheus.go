package stepkit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/autocapture/autocapture/vocab"
)

// HTTPClientOf is the endpoint's client, or one bounded by its Timeout.
func HTTPClientOf(e *vocab.Endpoint) *http.Client {
	if e.Client != nil {
		return e.Client
	}
	return &http.Client{Timeout: e.Timeout}
}

// PromAPIOf is the Prometheus HTTP API of a configured Prometheus. At the
// default address (e.Default) with nothing listening there, the step is not
// configured (DefaultPromAbsent), not failed: the operator never set one up.
func PromAPIOf(e *vocab.Endpoint) (v1.API, error) {
	if e.Default && nothingListens(e.URL) {
		return nil, vocab.NotConfigured("%s", DefaultPromAbsent(e.URL))
	}
	c, err := api.NewClient(api.Config{Address: e.URL, Client: HTTPClientOf(e)})
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "prometheus %s: %w", RedactURL(e.URL), err)
	}
	return v1.NewAPI(c), nil
}

// MaxRangePoints bounds the points a range query asks for: enough for a chart,
// cheap for Prometheus.
const MaxRangePoints = 250

// RangeStep picks the resolution of a range query over [start, end]: whole
// seconds, at least 1 s, at most MaxRangePoints points.
func RangeStep(start, end time.Time) time.Duration {
	span := end.Sub(start)
	step := (span + MaxRangePoints - 1) / MaxRangePoints
	step = step.Round(time.Second)
	if step*MaxRangePoints < span {
		step += time.Second
	}
	if step < time.Second {
		step = time.Second
	}
	return step
}

// PromErrReason gives a Prometheus API error its reason. Prometheus answers a
// query that ran out of time with 503 and errorType "timeout" in the body, and a
// bad query with 400 bad_data: that one is the playbook's fault.
func PromErrReason(err error) vocab.Reason {
	var ae *v1.Error
	if !errors.As(err, &ae) {
		return vocab.Classify(err)
	}
	switch ae.Type {
	case v1.ErrBadData:
		return vocab.ReasonBadConfig
	case v1.ErrTimeout:
		return vocab.ReasonTimeout
	case v1.ErrCanceled:
		return vocab.ReasonCancelled
	case v1.ErrClient:
		return vocab.ReasonUpstream4xx
	case v1.ErrServer:
		if strings.Contains(ae.Detail, `"timeout"`) {
			return vocab.ReasonTimeout
		}
		if strings.Contains(ae.Msg, "503") || strings.Contains(ae.Msg, "502") || strings.Contains(ae.Msg, "504") {
			return vocab.ReasonUnavailable
		}
		return vocab.ReasonUpstream5xx
	case v1.ErrExec:
		return vocab.ReasonUpstream4xx
	}
	return vocab.ReasonUpstream5xx
}

// DefaultPromAbsent says, once in words, that nothing answers at the default
// Prometheus address and what tier 1 used instead.
func DefaultPromAbsent(promURL string) string {
	return fmt.Sprintf("no Prometheus answers at %s (prometheus.url): tier 1 used the instance's own /metrics", RedactURL(promURL))
}

// nothingListens says whether a connection to rawURL's host is refused (a
// loopback default answers that at once); any other outcome, a dial that
// times out included, is left to the queries to report.
func nothingListens(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return false
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return false
}
