package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/vocab"
)

// ErrNotAllowed is matched (errors.Is) by every refusal of this package.
var ErrNotAllowed = errors.New("not allowed")

// RefusedError says which connection the allow-list refused and why. It is always
// wrapped in a vocab.Error with vocab.ReasonRefused.
type RefusedError struct {
	// Host is the name (or literal) the URL asked for.
	Host string
	// Addr is the resolved address that was refused; invalid for a refused redirect
	// scheme.
	Addr netip.AddrPort
	// Why is the rule that refused it, in words.
	Why string
}

func (e *RefusedError) Error() string {
	if !e.Addr.IsValid() {
		return fmt.Sprintf("target %s: %s", e.Host, e.Why)
	}
	if e.Addr.Addr().String() == e.Host {
		return fmt.Sprintf("target %s: %s %s", e.Addr, e.Addr, e.Why)
	}
	return fmt.Sprintf("target %s: %s resolves to %s, which %s", e.Host, e.Host, e.Addr, e.Why)
}

// Is makes errors.Is(err, ErrNotAllowed) true.
func (e *RefusedError) Is(target error) bool { return target == ErrNotAllowed }

// refused builds the classified error for a refusal.
func refused(host string, addr netip.AddrPort, why string) error {
	return &vocab.Error{Reason: vocab.ReasonRefused, Err: &RefusedError{Host: host, Addr: addr, Why: why}}
}

// Options are the Policy's collaborators.
type Options struct {
	// Log receives refresh failures of the scraped-instance list; nil means no logs.
	Log *zap.Logger
	// LookupIP resolves host names at connect time; nil means the system resolver.
	// Tests inject one so that no real DNS is ever queried.
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// PrometheusURL answers `up` when from_prometheus is on (a trusted address from
	// the daemon config; it is not checked against the allow-list).
	PrometheusURL string
	// PrometheusClient is used for those queries; nil means a 10 s client.
	PrometheusClient *http.Client
	// ScrapedTTL is how long the list of scraped instances is reused (default 30 s).
	ScrapedTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DaemonAddress is this daemon's web.listen_address: connections to it (every
	// local address with its port when it listens on 0.0.0.0 or ::) are refused
	// unless an entry names that exact ip:port. Empty refuses nothing.
	DaemonAddress string
	// LocalAddrs lists this machine's addresses, for a DaemonAddress on every
	// address; nil means the interfaces' addresses. Tests inject one.
	LocalAddrs func() ([]netip.Addr, error)
}

// Policy is the allow-list for untrusted targets.
type Policy struct {
	static    []entry
	names     []namePattern // the names that may be looked up (targets.names)
	self      *self         // nil when the daemon's address is unknown
	scraped   *scrapedSet   // nil unless from_prometheus
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	transport *http.Transport
}

// New parses cfg's entries and prepares the policy. It does no I/O.
func New(cfg config.Targets, opts Options) (*Policy, error) {
	p := &Policy{lookup: opts.LookupIP}
	if p.lookup == nil {
		p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	for i, raw := range cfg.Allow {
		e, err := parseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("targets: allow[%d]: %w", i, err)
		}
		p.static = append(p.static, e)
	}
	for i, raw := range cfg.Names {
		np, err := parseNamePattern(raw)
		if err != nil {
			return nil, fmt.Errorf("targets: names[%d]: %w", i, err)
		}
		p.names = append(p.names, np)
	}
	self, err := parseSelf(opts.DaemonAddress, opts.LocalAddrs)
	if err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	p.self = self
	if cfg.FromPrometheus {
		s, err := newScrapedSet(opts)
		if err != nil {
			return nil, fmt.Errorf("targets: from_prometheus: %w", err)
		}
		p.scraped = s
	}
	p.transport = &http.Transport{
		Proxy:                 nil, // a proxy would be the only address the dialer sees
		DialContext:           p.dialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	return p, nil
}

// maxRedirects bounds a redirect chain, as net/http's default does.
const maxRedirects = 5

// Client returns an HTTP client whose every connection, redirects included, is
// checked against the allow-list. timeout bounds a whole request (0: none, rely
// on the context).
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: p.transport,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("targets: stopped after %d redirects", maxRedirects)
			}
			return p.CheckURL(req.Context(), req.URL)
		},
	}
}

// CheckURL checks a URL before any request: the scheme must be http or https and
// every address its host resolves to must be allowed. The dialer checks again at
// connect time; this earlier check lets a caller report a refusal without trying.
func (p *Policy) CheckURL(ctx context.Context, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return refused(u.Host, netip.AddrPort{}, fmt.Sprintf("scheme %q is not http or https", u.Scheme))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := u.Hostname()
	pn, err := parsePort(port)
	if err != nil {
		return vocab.Errorf(vocab.ReasonBadConfig, "target %s: %w", u.Host, err)
	}
	entries, scrapeErr := p.entries(ctx)
	ips, err := p.resolve(ctx, entries, host, pn)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if err := p.verdict(entries, scrapeErr, host, netip.AddrPortFrom(ip, pn)); err != nil {
			return err
		}
	}
	return nil
}

// entries returns the static entries plus, when on, the scraped instances; a
// failure to learn those is returned beside the static list.
func (p *Policy) entries(ctx context.Context) ([]entry, error) {
	if p.scraped == nil {
		return p.static, nil
	}
	dyn, err := p.scraped.get(ctx)
	all := make([]entry, 0, len(p.static)+len(dyn))
	return append(append(all, p.static...), dyn...), err
}

// verdict is the one allow-list decision, used before and at connect time.
func (p *Policy) verdict(entries []entry, scrapeErr error, host string, ap netip.AddrPort) error {
	if _, ok, why := check(entries, host, ap.Addr(), ap.Port()); !ok {
		if scrapeErr != nil {
			why += fmt.Sprintf(" (the scraped-instance list is unavailable: %v)", scrapeErr)
		}
		return refused(host, ap, why)
	}
	if ip := normalize(ap.Addr()); p.self.is(ip, ap.Port()) && !slices.ContainsFunc(entries, func(e entry) bool {
		return e.namesExactly(ip, ap.Port())
	}) {
		return refused(host, ap, fmt.Sprintf("is this daemon's own API (web.listen_address %s) and no entry names that ip:port exactly", p.self.raw))
	}
	return nil
}

// resolve returns host's addresses: the literal itself, or a lookup of a
// name the policy may resolve (mayResolve).
func (p *Policy) resolve(ctx context.Context, entries []entry, host string, port uint16) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	if err := p.mayResolve(entries, host, port); err != nil {
		return nil, err
	}
	ips, err := p.lookup(ctx, host)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonUnreachable, "target %s: resolve: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, vocab.Errorf(vocab.ReasonUnreachable, "target %s: resolve: no addresses", host)
	}
	return ips, nil
}

// dialContext resolves addr's host itself and dials each address in turn through
// a dialer whose Control hook checks the exact ip:port being connected to, after
// the socket exists and before connect(2): what is checked is what is dialed.
func (p *Policy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "target %s: %w", addr, err)
	}
	pn, err := parsePort(ps)
	if err != nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "target %s: %w", addr, err)
	}
	entries, scrapeErr := p.entries(ctx)
	ips, err := p.resolve(ctx, entries, host, pn)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		d := net.Dialer{
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return refused(host, netip.AddrPort{}, fmt.Sprintf("unparsable address %q", address))
				}
				return p.verdict(entries, scrapeErr, host, ap)
			},
		}
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), ps))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, dialErrors(errs)
}

// dialErrors are the failures of each address a name resolved to, on one line
// (errors.Join would put a newline between them, and a thread shows one line
// per failed step); errors.Is and errors.As still see each of them.
type dialErrors []error

func (d dialErrors) Error() string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (d dialErrors) Unwrap() []error { return d }
