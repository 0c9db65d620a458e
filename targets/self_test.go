package targets

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
)

// TestDaemonsOwnAddressIsRefused: the default allow-list (loopback) would let
// an alert label point a step at the daemon's own API; its listen address is
// refused, in every spelling, before any connection, unless an entry names
// that exact host:port. Other ports of the same host stay allowed.
func TestDaemonsOwnAddressIsRefused(t *testing.T) {
	self, accepts := countingServer(t, "127.0.0.1:0")
	_, ps, _ := net.SplitHostPort(self.Listener.Addr().String())
	other, otherAccepts := countingServer(t, "127.0.0.1:0")
	p, err := New(config.Default().Targets, Options{LookupIP: fakeDNS(t, map[string][]string{"localhost": {"::1", "127.0.0.1"}}),
		DaemonAddress: "127.0.0.1:" + ps})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Client(2 * time.Second)
	for _, u := range []string{self.URL + "/api/v1/runs", "http://[::ffff:127.0.0.1]:" + ps + "/api/v1/runs", "http://localhost:" + ps + "/-/reload"} {
		_, err := get(context.Background(), c, u)
		assertRefused(t, err, "own", "127.0.0.1:"+ps)
	}
	if n := accepts.Load(); n != 0 {
		t.Fatalf("the daemon's own listener accepted %d connections", n)
	}
	if code, err := get(context.Background(), c, other.URL); err != nil || code != 200 || otherAccepts.Load() != 1 {
		t.Fatalf("another loopback port: %d, %v (accepts %d), want 200", code, err, otherAccepts.Load())
	}

	exact, err := New(config.Targets{Allow: []string{"127.0.0.0/8", "127.0.0.1:" + ps}}, Options{LookupIP: fakeDNS(t, nil), DaemonAddress: "127.0.0.1:" + ps})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get(context.Background(), exact.Client(2*time.Second), self.URL+"/-/healthy"); err != nil || code != 200 {
		t.Fatalf("an entry naming the daemon's address exactly: %d, %v; want 200", code, err)
	}
}

// TestDaemonListeningEverywhereRefusesEveryLocalAddress: listening on 0.0.0.0
// or :: means every local address with that port is the daemon; addresses of
// other hosts on that port are not. Only CheckURL is used: nothing is dialed.
func TestDaemonListeningEverywhereRefusesEveryLocalAddress(t *testing.T) {
	const port = 9095
	local := func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("127.0.0.1")}, nil
	}
	for _, listen := range []string{"0.0.0.0:9095", "[::]:9095", ":9095", "localhost:9095"} {
		t.Run(listen, func(t *testing.T) {
			p, err := New(config.Targets{Allow: []string{"0.0.0.0/0", "::/0"}}, Options{LookupIP: fakeDNS(t, nil),
				DaemonAddress: listen, LocalAddrs: local})
			if err != nil {
				t.Fatal(err)
			}
			refusedHosts := []string{"127.0.0.1", "127.0.0.9", "[::1]", "[::ffff:127.0.0.1]"}
			allowedHosts := []string{"10.0.0.6"}
			if listen != "localhost:9095" {
				refusedHosts = append(refusedHosts, "10.0.0.5", "[fd00::5]", "[64:ff9b::a00:5]")
			} else {
				allowedHosts = append(allowedHosts, "10.0.0.5")
			}
			for _, h := range refusedHosts {
				u, _ := url.Parse("http://" + h + ":" + strconv.Itoa(port) + "/api/v1/runs")
				assertRefused(t, p.CheckURL(context.Background(), u), "own")
			}
			for _, h := range allowedHosts {
				u, _ := url.Parse("http://" + h + ":" + strconv.Itoa(port) + "/")
				if err := p.CheckURL(context.Background(), u); err != nil {
					t.Errorf("%s: another host on the daemon's port refused: %v", h, err)
				}
			}
			u, _ := url.Parse("http://127.0.0.1:9096/")
			if err := p.CheckURL(context.Background(), u); err != nil {
				t.Errorf("another port of this machine refused: %v", err)
			}
		})
	}
	if _, err := New(config.Targets{}, Options{DaemonAddress: "nope"}); err == nil {
		t.Error("New accepted an unparsable daemon address")
	}
}
