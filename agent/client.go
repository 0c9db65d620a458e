package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrUnauthorized: the agent refused the token.
var ErrUnauthorized = errors.New("agent: unauthorized: the agent refused the token (both sides must read the same Secret)")

// ErrUnreachable: no HTTP answer from the agent (refused, timed out, reset).
var ErrUnreachable = errors.New("agent: unreachable")

// StatusError is any other non-success answer from the agent.
type StatusError struct {
	Code   int
	Word   string // the error word of the JSON answer, if any
	Reason string
}

func (e *StatusError) Error() string {
	if e.Word == "" {
		return fmt.Sprintf("agent answered %d", e.Code)
	}
	return fmt.Sprintf("agent answered %d %s: %s", e.Code, e.Word, e.Reason)
}

// Client reads an agent over HTTP.
type Client struct {
	URL   string // e.g. http://10.0.0.7:9101
	Token string
	// HTTP is the client to use; nil: one with dial and response-header
	// timeouts but no overall timeout, since a stream of hundreds of MB takes
	// as long as it takes (bound it with ctx).
	HTTP *http.Client
}

var defaultHTTP = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 30 * time.Second
	t.DisableCompression = true // trace files are gzip already; bytes pass through as stored
	return t
}()}

// List is Dir.List over HTTP.
func (c *Client) List(ctx context.Context, since time.Time) ([]File, error) {
	l, err := c.Snapshot(ctx, since)
	return l.Files, err
}

// Snapshot is List with the agent's clock at the time it listed.
func (c *Client) Snapshot(ctx context.Context, since time.Time) (Listing, error) {
	q := ""
	if !since.IsZero() {
		q = "?since=" + url.QueryEscape(since.Format(time.RFC3339Nano))
	}
	resp, err := c.do(ctx, "list", http.MethodGet, "/v1/files"+q, nil)
	if err != nil {
		return Listing{}, err
	}
	defer resp.Body.Close()
	var l Listing
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&l); err != nil {
		return Listing{}, fmt.Errorf("agent %s: list: decode the answer: %w", c.host(), err)
	}
	if l.Files == nil {
		l.Files = []File{}
	}
	return l, nil
}

// Open is Dir.Open over HTTP (streamed, never buffered whole). The body ends
// with an error, not a silent EOF, if the stream is cut before its length.
func (c *Client) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	return c.OpenFrom(ctx, name, 0)
}

// OpenFrom streams name from byte offset on, to resume a cut download.
func (c *Client) OpenFrom(ctx context.Context, name string, offset int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("agent: open %s: negative offset %d", name, offset)
	}
	if !validName(name) {
		return nil, fmt.Errorf("agent %s: open: %w: %q", c.host(), ErrNotFound, name)
	}
	h := http.Header{}
	if offset > 0 {
		h.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := c.do(ctx, "open "+name, http.MethodGet, "/v1/files/"+escapeName(name), h)
	if err != nil {
		return nil, err
	}
	if offset > 0 && resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		return nil, fmt.Errorf("agent %s: open %s: asked from byte %d, answered %d", c.host(), name, offset, resp.StatusCode)
	}
	return resp.Body, nil
}

// Remove is Dir.Remove over HTTP.
func (c *Client) Remove(ctx context.Context, name string) error {
	if !validName(name) {
		return fmt.Errorf("agent %s: remove: %w: %q", c.host(), ErrNotFound, name)
	}
	resp, err := c.do(ctx, "remove "+name, http.MethodDelete, "/v1/files/"+escapeName(name), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// do sends one request and turns every non-2xx answer into an error; op
// names the call in the error. Neither the token nor the URL's userinfo
// appears in an error.
func (c *Client) do(ctx context.Context, op, method, rel string, h http.Header) (*http.Response, error) {
	base, err := url.Parse(strings.TrimRight(c.URL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("agent: %s: URL %q: want http(s)://host:port", op, redactURL(c.URL))
	}
	req, err := http.NewRequestWithContext(ctx, method, base.String()+rel, nil)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %s: %w", base.Host, op, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent %s: %s: %w", base.Host, op, context.Cause(ctx))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		return nil, fmt.Errorf("agent %s: %s: %w: %w", base.Host, op, ErrUnreachable, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var body errorBody
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("agent %s: %s: %w (%s)", base.Host, op, ErrUnauthorized, body.Reason)
	case http.StatusNotFound:
		return nil, fmt.Errorf("agent %s: %s: %w", base.Host, op, ErrNotFound)
	}
	return nil, fmt.Errorf("agent %s: %s: %w", base.Host, op, &StatusError{Code: resp.StatusCode, Word: body.Error, Reason: body.Reason})
}

func (c *Client) host() string {
	if u, err := url.Parse(c.URL); err == nil {
		return u.Host
	}
	return "?"
}

// escapeName escapes each element of a slash-separated name for the path.
func escapeName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "<unparsable>"
}
