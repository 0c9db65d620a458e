package targets

import (
	"fmt"
	"net"
	"net/netip"
)

// self is the daemon's own listen address (web.listen_address): its API starts,
// cancels and lists runs, so an alert label must not point a step at it. The
// default allow-list (loopback) would admit it.
type self struct {
	raw  string
	port uint16
	// addr is the one listened-on address; invalid when every address is
	// (0.0.0.0, ::, an empty host) or, with loopback, every loopback one.
	addr     netip.Addr
	anyLocal bool // 0.0.0.0, :: or no host: every address of this machine
	loopback bool // localhost: every loopback address
	local    func() ([]netip.Addr, error)
}

// parseSelf reads a listen address such as 127.0.0.1:9095, 0.0.0.0:9095, :9095
// or localhost:9095. A host name other than localhost is taken as every local
// address: listening on it can only bind addresses of this machine. An empty
// listen address or port 0 refuses nothing.
func parseSelf(listen string, local func() ([]netip.Addr, error)) (*self, error) {
	if listen == "" {
		return nil, nil
	}
	host, ps, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("daemon address %q: %w", listen, err)
	}
	if ps == "0" {
		return nil, nil
	}
	port, err := parsePort(ps)
	if err != nil {
		return nil, fmt.Errorf("daemon address %q: %w", listen, err)
	}
	s := &self{raw: listen, port: port, local: local}
	if s.local == nil {
		s.local = interfaceAddrs
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err == nil && !ip.IsUnspecified():
		s.addr = normalize(ip)
	case host == "localhost":
		s.loopback = true
	default:
		s.anyLocal = true
	}
	return s, nil
}

// is says whether a normalized ip:port reaches the daemon itself.
func (s *self) is(ip netip.Addr, port uint16) bool {
	if s == nil || port != s.port {
		return false
	}
	switch {
	case s.addr.IsValid():
		return ip == s.addr
	case s.loopback:
		return ip.IsLoopback()
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := s.local()
	if err != nil {
		return true // cannot tell which addresses are ours: refuse the port
	}
	for _, a := range addrs {
		if normalize(a) == ip {
			return true
		}
	}
	return false
}

// interfaceAddrs lists this machine's addresses.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
