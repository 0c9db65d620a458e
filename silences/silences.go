// Package silences makes, finds and expires silences in Alertmanager through
// its API v2, with Alertmanager's own generated client. An HA pair is one
// Alertmanager to it: each call goes to the first URL that answers, and the
// pair's gossip carries a silence to the other member.
package silences

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/go-openapi/runtime"
	httptransport "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"
	amclient "github.com/prometheus/alertmanager/api/v2/client"

	"github.com/autocapture/autocapture/config"
)

// Silence is what one silence says: equality matchers on labels, how long,
// who made it and why.
type Silence struct {
	// Matchers are label = value; all must match.
	Matchers []Matcher
	// EndsAt is when it lapses by itself.
	EndsAt time.Time
	// CreatedBy names the person ("alice (U0ALICE)").
	CreatedBy string
	// Comment says why, with a link to the run; with Matchers it identifies
	// the silence when a resumed action looks for one it may have made.
	Comment string
}

// Matcher is one label = value.
type Matcher struct{ Name, Value string }

// Found is a silence as Alertmanager holds it.
type Found struct {
	ID        string
	State     string // active, pending or expired
	EndsAt    time.Time
	CreatedBy string
	Comment   string
	Matchers  []Matcher
}

// ErrUnavailable marks a call no Alertmanager answered (down, unreachable,
// a 5xx): try again later. ErrRefused marks an answer that said no (4xx):
// trying again will not help until the cause is fixed.
var (
	ErrUnavailable = errors.New("no Alertmanager answered")
	ErrRefused     = errors.New("Alertmanager refused")
)

// Client talks to one Alertmanager, or to the members of an HA pair in turn.
type Client struct {
	urls    []string
	apis    []*amclient.AlertmanagerAPI
	timeout time.Duration
}

// New builds a client for c.URLs; auth and the CA bundle apply to all of them.
func New(c config.Alertmanager) (*Client, error) {
	if len(c.URLs) == 0 {
		return nil, errors.New("silences: no alertmanager.urls")
	}
	hc, err := httpClient(c)
	if err != nil {
		return nil, err
	}
	var auth runtime.ClientAuthInfoWriter
	switch {
	case !c.BearerToken.Blank():
		auth = httptransport.BearerToken(c.BearerToken.Reveal())
	case c.BasicAuth != nil:
		auth = httptransport.BasicAuth(c.BasicAuth.Username, c.BasicAuth.Password.Reveal())
	}
	cl := &Client{urls: c.URLs, timeout: c.Timeout}
	if cl.timeout <= 0 {
		cl.timeout = 10 * time.Second
	}
	for _, raw := range c.URLs {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("silences: alertmanager url %q: want scheme://host[:port][/prefix]", raw)
		}
		rt := httptransport.NewWithClient(u.Host, path(u.Path)+"/api/v2/", []string{u.Scheme}, hc)
		rt.DefaultAuthentication = auth
		cl.apis = append(cl.apis, amclient.New(rt, strfmt.Default))
	}
	return cl, nil
}

func path(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

func httpClient(c config.Alertmanager) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("silences: alertmanager.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("silences: alertmanager.ca_file %s holds no PEM certificate", c.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{Transport: tr}, nil
}

// each calls f on each Alertmanager in turn until one answers; an answer
// that refuses (4xx) is final. It returns the last error, marked.
func (c *Client) each(ctx context.Context, what string, f func(ctx context.Context, api *amclient.AlertmanagerAPI) error) error {
	var last error
	for i, api := range c.apis {
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := f(cctx, api)
		cancel()
		if err == nil {
			return nil
		}
		if code, ok := statusOf(err); ok && code >= 400 && code < 500 {
			return fmt.Errorf("%w: %s at %s: %d %v", ErrRefused, what, c.urls[i], code, err)
		}
		last = fmt.Errorf("%w: %s at %s: %v", ErrUnavailable, what, c.urls[i], err)
		if ctx.Err() != nil {
			break
		}
	}
	return last
}

// statusOf is the HTTP status of an answer the generated client turned into
// an error, false for no answer at all.
func statusOf(err error) (int, bool) {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code(), true
	}
	var api *runtime.APIError
	if errors.As(err, &api) {
		return api.Code, true
	}
	return 0, false
}
