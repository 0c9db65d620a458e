package targets

import (
	"net/netip"
	"strings"

	"github.com/autocapture/autocapture/config"
)

// namePattern is one targets.names entry: an exact host name, "*.suffix"
// (any name under suffix, not suffix itself) or "*" (every name).
type namePattern struct {
	raw    string
	exact  string // lower case, no trailing dot
	suffix string // ".suffix" for *.suffix
	any    bool
}

// parseNamePattern reads one targets.names entry.
func parseNamePattern(s string) (namePattern, error) {
	np := namePattern{raw: s}
	if err := config.CheckTargetName(s); err != nil {
		return np, err
	}
	switch t := normName(strings.TrimSpace(s)); {
	case t == "*":
		np.any = true
	case strings.HasPrefix(t, "*."):
		np.suffix = t[1:]
	default:
		np.exact = t
	}
	return np, nil
}

func (np namePattern) matches(name string) bool {
	switch {
	case np.any:
		return true
	case np.suffix != "":
		return len(name) > len(np.suffix) && strings.HasSuffix(name, np.suffix)
	}
	return name == np.exact
}

// mayResolve says whether host may be looked up at all: an IP literal needs
// no lookup; a name must be one an allow entry names (on port, or any port)
// or one a targets.names pattern matches. Checked before any DNS query, so
// text from a label reaches a resolver only when the config expected names
// like it.
func (p *Policy) mayResolve(entries []entry, host string, port uint16) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	name := normName(host)
	for _, e := range entries {
		if e.name == name && (e.port == 0 || e.port == port) {
			return nil
		}
	}
	for _, np := range p.names {
		if np.matches(name) {
			return nil
		}
	}
	return refused(host, netip.AddrPort{}, "is a name that no targets.allow entry names and no targets.names pattern matches: refused before any DNS lookup")
}
