// Package targets guards every outbound connection to an address taken from an
// alert label. Alert labels are untrusted: an allow-list from the daemon config
// (host names, host:port, CIDRs, :port, and optionally every instance Prometheus
// scrapes) is checked at connect time on the resolved IP and port, so neither a
// DNS answer nor a redirect can lead a connection elsewhere.
package targets

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// linkLocal4 and linkLocal6 hold link-local addresses, cloud metadata services
// (169.254.169.254, fd00:ec2::254 aside) among them: refused unless an entry names
// an address range inside them.
var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// entry is one parsed allow-list line. Exactly one of name, prefix or any is set;
// port 0 means any port.
type entry struct {
	raw    string
	name   string       // lower-case host name, matched against the dialed host
	prefix netip.Prefix // an IP (as /32 or /128) or a CIDR
	any    bool         // ":port": any address on that port
	port   uint16
}

// parseEntry reads one allow-list entry: "name", "name:port", "ip", "ip:port",
// "[v6]:port", "cidr" or ":port".
func parseEntry(s string) (entry, error) {
	e := entry{raw: s}
	s = strings.TrimSpace(s)
	if s == "" {
		return e, fmt.Errorf("empty entry")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return e, fmt.Errorf("bad CIDR %q: %w", s, err)
		}
		e.prefix = p.Masked()
		return e, nil
	}
	host := s
	if h, p, err := net.SplitHostPort(s); err == nil {
		port, err := parsePort(p)
		if err != nil {
			return e, fmt.Errorf("entry %q: %w", s, err)
		}
		host, e.port = h, port
	}
	if host == "" {
		if e.port == 0 {
			return e, fmt.Errorf("entry %q: no host and no port", s)
		}
		e.any = true
		return e, nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		e.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return e, nil
	}
	if strings.ContainsAny(host, "[]:@ ") {
		return e, fmt.Errorf("entry %q: not a host name, address, CIDR or :port", s)
	}
	e.name = normName(host)
	return e, nil
}

// parsePort reads a TCP port, 1..65535.
func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return uint16(n), nil
}

// normName makes host names comparable: lower case, no trailing dot.
func normName(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// allows says whether the entry admits a connection to ip:port that was asked
// for by the host name (or literal) host.
func (e entry) allows(host string, ip netip.Addr, port uint16) bool {
	if e.port != 0 && e.port != port {
		return false
	}
	switch {
	case e.any:
		return true
	case e.name != "":
		return e.name == normName(host)
	default:
		return e.prefix.Contains(ip)
	}
}

// namesLinkLocal says whether the entry explicitly lists link-local addresses:
// an address or CIDR inside 169.254.0.0/16 or fe80::/10. 0.0.0.0/0 does not.
func (e entry) namesLinkLocal() bool {
	if !e.prefix.IsValid() {
		return false
	}
	a := e.prefix.Addr()
	return (linkLocal4.Contains(a) && e.prefix.Bits() >= linkLocal4.Bits()) ||
		(linkLocal6.Contains(a) && e.prefix.Bits() >= linkLocal6.Bits())
}

// isLinkLocal covers unicast and multicast link-local ranges of both families.
func isLinkLocal(ip netip.Addr) bool {
	return ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		linkLocal4.Contains(ip) || linkLocal6.Contains(ip)
}

// check runs ip:port (dialed for host) through the entries; it returns the
// matching entry's text, or why nothing matched.
func check(entries []entry, host string, ip netip.Addr, port uint16) (string, bool, string) {
	ip = ip.Unmap()
	if ip.IsUnspecified() || ip.IsMulticast() {
		return "", false, "is an unspecified or multicast address, never a target"
	}
	ll := isLinkLocal(ip)
	for _, e := range entries {
		if !e.allows(host, ip, port) {
			continue
		}
		if ll && !e.namesLinkLocal() {
			continue
		}
		return e.raw, true, ""
	}
	if ll {
		return "", false, "is link-local (where cloud metadata services live) and no entry lists it"
	}
	return "", false, "is not on the allow-list"
}
