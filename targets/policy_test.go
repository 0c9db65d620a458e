package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/vocab"
)

// countingServer listens on addr (e.g. 127.0.0.2:0) and counts accepted
// connections, to prove that a refusal happened before any connection.
func countingServer(t *testing.T, addr string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var accepts atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secret")
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepts.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &accepts
}

// fakeDNS resolves from a table and fails the test on any other name: no test
// ever asks real DNS.
func fakeDNS(t *testing.T, table map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		ips, ok := table[host]
		if !ok {
			t.Errorf("unexpected DNS lookup of %q", host)
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		out := make([]netip.Addr, len(ips))
		for i, s := range ips {
			out[i] = netip.MustParseAddr(s)
		}
		return out, nil
	}
}

func get(ctx context.Context, c *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func assertRefused(t *testing.T, err error, mention ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("request succeeded, want a refusal")
	}
	if !errors.Is(err, ErrNotAllowed) || vocab.Classify(err) != vocab.ReasonRefused {
		t.Fatalf("err = %v (reason %q), want an allow-list refusal", err, vocab.Classify(err))
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestClientAllowsLoopbackByDefault(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p, err := New(config.Default().Targets, Options{LookupIP: fakeDNS(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	code, err := get(context.Background(), p.Client(5*time.Second), srv.URL)
	if err != nil || code != 200 {
		t.Fatalf("GET %s = %d, %v; want 200", srv.URL, code, err)
	}
}

func TestClientRefusesOutsideAddressesBeforeConnecting(t *testing.T) {
	cases := []struct {
		name  string
		allow []string
		url   string
		want  []string
	}{
		{"private ten", nil, "http://10.1.2.3:8000/version", []string{"10.1.2.3:8000", "not on the allow-list"}},
		{"cloud metadata", nil, "http://169.254.169.254/latest/meta-data/", []string{"169.254.169.254:80", "link-local"}},
		{"metadata even under allow-all", []string{"0.0.0.0/0"}, "http://169.254.169.254/", []string{"link-local"}},
		{"ipv6 link-local", nil, "http://[fe80::1]:8000/", []string{"[fe80::1]:8000", "link-local"}},
		{"ipv4-mapped metadata", []string{"0.0.0.0/0"}, "http://[::ffff:169.254.169.254]/", []string{"link-local"}},
		{"unspecified reaches localhost", []string{"0.0.0.0/0"}, "http://0.0.0.0:9/", []string{"unspecified"}},
		{"wrong port on an allowed host", []string{"127.0.0.1:8000"}, "http://127.0.0.1:8001/", []string{"127.0.0.1:8001"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default().Targets
			if c.allow != nil {
				cfg.Allow = c.allow
			}
			p, err := New(cfg, Options{LookupIP: fakeDNS(t, nil)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = get(context.Background(), p.Client(2*time.Second), c.url)
			assertRefused(t, err, c.want...)
			u, _ := url.Parse(c.url)
			assertRefused(t, p.CheckURL(context.Background(), u), c.want...)
		})
	}
}

func TestExplicitLinkLocalEntryAllowsIt(t *testing.T) {
	p, err := New(config.Targets{Allow: []string{"169.254.169.254/32"}}, Options{LookupIP: fakeDNS(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://169.254.169.254/latest/meta-data/")
	if err := p.CheckURL(context.Background(), u); err != nil {
		t.Fatalf("explicitly listed link-local address refused: %v", err)
	}
}

func TestRefusalsNeverReachTheListener(t *testing.T) {
	outside, accepts := countingServer(t, "127.0.0.2:0")
	_, port, _ := net.SplitHostPort(outside.Listener.Addr().String())
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, outside.URL+"/stolen", http.StatusFound)
	}))
	defer inside.Close()
	dns := fakeDNS(t, map[string][]string{"evil.test": {"127.0.0.2"}})
	cases := []struct {
		name string
		url  string
		want []string
	}{
		{"address outside", outside.URL, []string{"127.0.0.2:" + port}},
		{"name resolving outside", "http://evil.test:" + port + "/", []string{"evil.test", "127.0.0.2:" + port}},
		{"redirect from an allowed server", inside.URL, []string{"127.0.0.2:" + port}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := New(config.Targets{Allow: []string{"127.0.0.1/32"}, Names: testNames}, Options{LookupIP: dns})
			if err != nil {
				t.Fatal(err)
			}
			_, err = get(context.Background(), p.Client(2*time.Second), c.url)
			assertRefused(t, err, c.want...)
			if n := accepts.Load(); n != 0 {
				t.Fatalf("the refused server accepted %d connections", n)
			}
		})
	}
}

func TestNameEntryAllowsWhatTheNameResolvesToAtConnectTime(t *testing.T) {
	good, goodAccepts := countingServer(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(good.Listener.Addr().String())
	bad, badAccepts := countingServer(t, "127.0.0.2:"+port)
	_ = bad
	// The name first resolves inside, then (DNS rebinding) to an address no entry
	// lists; each connection is checked on what it actually dials.
	var calls atomic.Int64
	rebinding := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "vllm.test" {
			t.Errorf("unexpected lookup %q", host)
		}
		if calls.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}
	p, err := New(config.Targets{Allow: []string{"127.0.0.1/32"}, Names: testNames}, Options{LookupIP: rebinding})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Client(2 * time.Second)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	u := "http://vllm.test:" + port + "/"
	if code, err := get(context.Background(), c, u); err != nil || code != 200 {
		t.Fatalf("first GET = %d, %v", code, err)
	}
	_, err = get(context.Background(), c, u)
	assertRefused(t, err, "vllm.test", "127.0.0.2:"+port)
	if goodAccepts.Load() != 1 || badAccepts.Load() != 0 {
		t.Fatalf("accepts: inside %d (want 1), outside %d (want 0)", goodAccepts.Load(), badAccepts.Load())
	}

	// A name entry admits the name's own answers, and only for that name.
	named, err := New(config.Targets{Allow: []string{"vllm.test:" + port}}, Options{LookupIP: fakeDNS(t, map[string][]string{
		"vllm.test": {"127.0.0.2"}, "other.test": {"127.0.0.2"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get(context.Background(), named.Client(2*time.Second), u); err != nil || code != 200 {
		t.Fatalf("GET via name entry = %d, %v", code, err)
	}
	_, err = get(context.Background(), named.Client(2*time.Second), "http://other.test:"+port+"/")
	assertRefused(t, err, "other.test")
}

func TestParseEntry(t *testing.T) {
	cases := []struct {
		name, in string
		host     string
		ip       string
		port     uint16
		allowed  bool
		wantErr  bool
	}{
		{"cidr", "10.0.0.0/8", "10.9.9.9", "10.9.9.9", 1234, true, false},
		{"cidr outside", "10.0.0.0/8", "11.0.0.1", "11.0.0.1", 80, false, false},
		{"ip", "10.0.0.5", "10.0.0.5", "10.0.0.5", 80, true, false},
		{"ip:port other port", "10.0.0.5:8000", "10.0.0.5", "10.0.0.5", 80, false, false},
		{"v6 with port", "[fd00::1]:8000", "fd00::1", "fd00::1", 8000, true, false},
		{"name any port", "VLLM-0.svc.", "vllm-0.svc", "10.1.1.1", 9, true, false},
		{"name:port", "vllm-0:8000", "vllm-0", "10.1.1.1", 8000, true, false},
		{"name other host", "vllm-0", "vllm-1", "10.1.1.1", 8000, false, false},
		{":port", ":8000", "x", "8.8.8.8", 8000, true, false},
		{"bad cidr", "10.0.0.0/99", "", "", 0, false, true},
		{"bad port", "host:0", "", "", 0, false, true},
		{"empty", " ", "", "", 0, false, true},
		{"no host no port", ":", "", "", 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := parseEntry(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("parseEntry(%q) err = %v, wantErr %v", c.in, err, c.wantErr)
			}
			if err != nil {
				return
			}
			_, ok, _ := check([]entry{e}, c.host, netip.MustParseAddr(c.ip), c.port)
			if ok != c.allowed {
				t.Fatalf("entry %q allows %s(%s):%d = %v, want %v", c.in, c.host, c.ip, c.port, ok, c.allowed)
			}
		})
	}
}

// TestRefusalOfEveryAddressIsOneLine: a name resolving to several refused
// addresses gives one refusal per address, on one line, still classified refused.
func TestRefusalOfEveryAddressIsOneLine(t *testing.T) {
	p, err := New(config.Targets{Allow: []string{"127.0.0.2/32"}, Names: []string{"*.internal"}},
		Options{LookupIP: fakeDNS(t, map[string][]string{"vllm-0.internal": {"10.9.8.7", "fd00::7"}})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(context.Background(), p.Client(2*time.Second), "http://vllm-0.internal:8000/metrics")
	assertRefused(t, err, "10.9.8.7", "fd00::7")
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal spans several lines: %q", err)
	}
}

// TestNetworkFailuresAreUnreachableNotRefused: a name that does not resolve
// and an allowed address nobody listens on are network facts (`unreachable`,
// retryable), never the allow-list's `refused`.
func TestNetworkFailuresAreUnreachableNotRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	nx, err := New(config.Targets{Allow: []string{"127.0.0.0/8", "gone.test"}}, Options{LookupIP: func(_ context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://" + dead + "/metrics", "http://gone.test:8000/metrics"} {
		_, err := get(context.Background(), nx.Client(2*time.Second), u)
		if err == nil || errors.Is(err, ErrNotAllowed) || vocab.Classify(err) != vocab.ReasonUnreachable {
			t.Errorf("GET %s: err %v (reason %q), want unreachable and no allow-list refusal", u, err, vocab.Classify(err))
		}
	}
}
