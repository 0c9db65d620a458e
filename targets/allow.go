// Package targets guards every outbound connection to an address taken from an
// alert label. Alert labels are untrusted: an allow-list from the daemon config
// (host names, host:port, CIDRs, :port, and optionally every instance Prometheus
// scrapes) is checked at connect time on the resolved IP and port, so neither a
// DNS answer nor a redirect can lead a connection elsewhere. A host name is
// looked up only when an entry names it or targets.names matches it, so
// label text reaches no resolver the config did not expect.
package targets

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/config"
)

// linkLocal4 and linkLocal6 hold link-local addresses, where most cloud metadata
// services live: refused unless a static entry names an address range inside them.
var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// metadataAddrs are cloud metadata and host-agent endpoints: they hand
// credentials and instance secrets to anyone who asks from inside the machine.
// Each is refused, whatever entry would admit it (0.0.0.0/0, ::/0, a CIDR, a
// name resolving to it), unless a static entry names that exact address. The
// link-local ones are listed too, so that a 169.254.0.0/16 entry does not
// admit them.
var metadataAddrs = []struct {
	addr netip.Addr
	what string
}{
	// AWS EC2 IMDS, GCP, Azure IMDS, OpenStack, Oracle Cloud, DigitalOcean, Hetzner, IBM.
	{netip.MustParseAddr("169.254.169.254"), "AWS IMDS, GCP, Azure, OpenStack, Oracle"},
	// AWS EC2 IMDS over IPv6 (Nitro instances).
	{netip.MustParseAddr("fd00:ec2::254"), "AWS IMDS over IPv6"},
	// AWS ECS task metadata and task-role credentials.
	{netip.MustParseAddr("169.254.170.2"), "AWS ECS task metadata and credentials"},
	// GCP metadata server for IPv6-only instances.
	{netip.MustParseAddr("fd20:ce::254"), "GCP metadata server over IPv6"},
	// Azure WireServer: the host agent that serves certificates and extension settings.
	{netip.MustParseAddr("168.63.129.16"), "Azure WireServer (host agent)"},
	// Alibaba Cloud ECS metadata (in the 100.64.0.0/10 shared range).
	{netip.MustParseAddr("100.100.100.200"), "Alibaba Cloud ECS metadata"},
	// Oracle Cloud metadata in the 192.0.0.0/24 IETF range.
	{netip.MustParseAddr("192.0.0.192"), "Oracle Cloud metadata"},
	// Tencent Cloud CVM metadata (metadata.tencentyun.com).
	{netip.MustParseAddr("169.254.0.23"), "Tencent Cloud metadata"},
}

// metadataService says which metadata endpoint a normalized address is, if any.
func metadataService(ip netip.Addr) (string, bool) {
	for _, m := range metadataAddrs {
		if m.addr == ip {
			return m.what, true
		}
	}
	return "", false
}

// The IPv6 spellings of an IPv4 address that reach (or are treated by some
// stack as) that IPv4 address.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: NAT64 translates to the last 32 bits
	v4Compatible   = netip.MustParsePrefix("::/96")        // RFC 4291 2.5.5.1, deprecated (::1 and :: excluded below)
	sixToFour      = netip.MustParsePrefix("2002::/16")    // RFC 3056: tunnelled to the IPv4 address in bits 16-47
)

// normalize returns the address every check is made on: an IPv4 address however
// spelled (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, IPv4-compatible
// ::a.b.c.d, 6to4 2002:aabb:ccdd::) becomes that IPv4 address, and the zone is
// dropped. So 0.0.0.0/0 never admits ::ffff:169.254.169.254 as "not link-local",
// and ::/0 never admits 64:ff9b::7f00:1 as "not loopback".
func normalize(ip netip.Addr) netip.Addr {
	ip = ip.WithZone("").Unmap()
	if !ip.Is6() {
		return ip
	}
	b := ip.As16()
	switch {
	case nat64WellKnown.Contains(ip), v4Compatible.Contains(ip) && b[12] != 0:
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return ip
}

// normalizePrefix turns an entry's IPv4-mapped or NAT64 CIDR (at least /96)
// into the IPv4 CIDR it means, and a single address into its normalized form.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if p.IsSingleIP() {
		n := normalize(a)
		return netip.PrefixFrom(n, n.BitLen())
	}
	if a.Is6() && p.Bits() >= 96 && (a.Is4In6() || nat64WellKnown.Contains(a)) {
		b := a.As16()
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[12:16])), p.Bits()-96)
	}
	return p
}

// entry is one parsed allow-list line. Exactly one of name, prefix or any is set;
// port 0 means any port.
type entry struct {
	raw    string
	name   string       // lower-case host name, matched against the dialed host
	prefix netip.Prefix // an IP (as /32 or /128) or a CIDR, normalized
	any    bool         // ":port": any address on that port
	port   uint16
	// scraped marks an instance learned from Prometheus: it admits ordinary
	// addresses but never exempts a metadata, link-local or own address (only
	// the daemon config can).
	scraped bool
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
		e.prefix = normalizePrefix(p.Masked())
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
		ip = normalize(ip)
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

// namesLinkLocal says whether a static entry explicitly lists link-local
// addresses: an address or CIDR inside 169.254.0.0/16 or fe80::/10. 0.0.0.0/0
// does not.
func (e entry) namesLinkLocal() bool {
	if !e.prefix.IsValid() || e.scraped {
		return false
	}
	a := e.prefix.Addr()
	return (linkLocal4.Contains(a) && e.prefix.Bits() >= linkLocal4.Bits()) ||
		(linkLocal6.Contains(a) && e.prefix.Bits() >= linkLocal6.Bits())
}

// namesExactly says whether a static entry is the single address ip (with any
// port, or the given one when port is not 0).
func (e entry) namesExactly(ip netip.Addr, port uint16) bool {
	return !e.scraped && e.prefix.IsValid() && e.prefix.IsSingleIP() && e.prefix.Addr() == ip &&
		(port == 0 || e.port == port)
}

// isLinkLocal covers unicast and multicast link-local ranges of both families.
func isLinkLocal(ip netip.Addr) bool {
	return ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		linkLocal4.Contains(ip) || linkLocal6.Contains(ip)
}

// check runs ip:port (dialed for host) through the entries, on the normalized
// address; it returns the matching entry's text, or why nothing matched. A
// metadata address needs an entry naming it exactly, a link-local one an
// entry inside the link-local range, whatever else would admit them.
func check(entries []entry, host string, ip netip.Addr, port uint16) (string, bool, string) {
	spelled := ""
	if n := normalize(ip); n != ip.WithZone("") {
		spelled = fmt.Sprintf("is %s in another spelling, which ", n)
		ip = n
	}
	if ip.IsUnspecified() || ip.IsMulticast() {
		return "", false, spelled + "is an unspecified or multicast address, never a target"
	}
	meta, isMeta := metadataService(ip)
	ll := isLinkLocal(ip)
	for _, e := range entries {
		if !e.allows(host, ip, port) {
			continue
		}
		if isMeta && !e.namesExactly(ip, 0) || !isMeta && ll && !e.namesLinkLocal() {
			continue
		}
		return e.raw, true, ""
	}
	switch {
	case isMeta && ll:
		return "", false, spelled + "is link-local, a cloud metadata address (" + meta + "), and no entry names it exactly"
	case isMeta:
		return "", false, spelled + "is a cloud metadata address (" + meta + ") and no entry names it exactly"
	case ll:
		return "", false, spelled + "is link-local (where cloud metadata services live) and no entry lists it"
	}
	return "", false, spelled + "is not on the allow-list"
}

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
