package config

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"golang.org/x/net/http/httpguts"
)

// TrustedProxy is web.auth.trusted_proxy: a single sign-on proxy in front of
// the daemon (oauth2-proxy, an ingress's auth_request) that names the
// signed-in user in a header, such as oauth2-proxy's X-Forwarded-Email.
//
// The header authenticates a request only when the request's TCP peer is one
// of from: the header from any other address is ignored (it never
// authenticates, and the request is held to the rest of web.auth), so a
// client that reaches the daemon directly cannot name itself. It is never
// read from X-Forwarded-For or any other header a client can set.
//
// Its reach is the read-only pages for people: GET/HEAD /runs, /runs/{id}
// and the artifacts they link. It does not authenticate the webhook, the API
// or /-/reload, which keep web.auth's token or password (a browser session
// must not be able to cancel runs or pause profiling, and the machine
// callers hold the token anyway); for the same reason it does not satisfy
// the guard on listening beyond loopback without auth.
type TrustedProxy struct {
	// Header names the signed-in user, e.g. X-Forwarded-Email. Its value is
	// taken as given: the proxy must set it (overwriting what a client sent).
	Header string `yaml:"header" json:"header"`
	// From lists the proxy's addresses: IPs or CIDRs (10.0.3.7,
	// 10.42.0.0/16, fd00::/8), matched against the connection's peer.
	From []string `yaml:"from" json:"from"`
}

// Prefixes is From parsed: an address is a prefix of its full length, IPv4
// in IPv6 (::ffff:a.b.c.d) as IPv4.
func (p TrustedProxy) Prefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(p.From))
	for _, f := range p.From {
		pf, err := parseTrusted(f)
		if err != nil {
			return nil, err
		}
		out = append(out, pf)
	}
	return out, nil
}

func parseTrusted(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("empty entry")
	}
	if strings.Contains(s, "/") {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("bad CIDR %q: %v", s, err)
		}
		if pf.Addr().Is4In6() {
			pf = netip.PrefixFrom(pf.Addr().Unmap(), max(pf.Bits()-96, 0))
		}
		return pf.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want an IP address or a CIDR, got %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// untrustworthyHeaders name no user: a client sets them, or they carry the
// API's own credential.
var untrustworthyHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Host",
	"Forwarded", "X-Forwarded-For", "X-Real-Ip"}

// checkTrustedProxy validates web.auth.trusted_proxy: a header that can name
// a user, and at least one address, each an IP or a CIDR narrower than
// everyone.
func (v *validator) checkTrustedProxy(p *TrustedProxy) {
	if p == nil {
		return
	}
	const path = "$.web.auth.trusted_proxy"
	h := strings.TrimSpace(p.Header)
	switch {
	case h == "":
		const want = "the header your proxy sets to the signed-in user, e.g. X-Forwarded-Email"
		if v.has(path + ".header") { // header: "" is reported at itself, a missing one at the block
			v.errorf(path+".header", "is empty: want %s", want)
		} else {
			v.errorf(path, "header is required: %s", want)
		}
	case !httpguts.ValidHeaderFieldName(h):
		v.errorf(path+".header", "%q is not a header name", p.Header)
	case slices.Contains(untrustworthyHeaders, http.CanonicalHeaderKey(h)):
		v.errorf(path+".header", "%s names no signed-in user (a client sets it, or it carries the API's credential); use the header your proxy sets, e.g. X-Forwarded-Email", h)
	}
	if len(p.From) == 0 {
		v.errorf(path, "from is required: the proxy's addresses (IPs or CIDRs); the header is honoured only from them")
	}
	for i, f := range p.From {
		pf, err := parseTrusted(f)
		switch {
		case err != nil:
			v.errorf(fmt.Sprintf("%s.from[%d]", path, i), "%v", err)
		case pf.Bits() == 0:
			v.errorf(fmt.Sprintf("%s.from[%d]", path, i), "%s trusts every client to name itself; list the proxy's addresses", f)
		}
	}
}

// has says whether the file holds a YAML path.
func (v *validator) has(path string) bool {
	if v.f == nil {
		return false
	}
	p, err := yaml.PathString(path)
	if err != nil {
		return false
	}
	n, err := p.FilterFile(v.f)
	return err == nil && n != nil
}
