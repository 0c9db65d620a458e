package targets

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
)

// broadEntries are allow-lists an operator writes for a fleet; none of them
// names a metadata address.
var broadEntries = [][]string{{"0.0.0.0/0", "::/0"}, {"100.64.0.0/10", "fd00::/8"}, {":80"}}

// TestMetadataAndLinkLocalRefusedInEverySpelling: under broad allow entries,
// metadata endpoints outside link-local and every other spelling of a refused
// address (IPv4-mapped, NAT64, IPv4-compatible, 6to4) are refused before any
// connection, as URL literals and as what a name resolves to.
func TestMetadataAndLinkLocalRefusedInEverySpelling(t *testing.T) {
	addrs := []struct{ addr, want string }{
		{"fd00:ec2::254", "AWS"},
		{"100.100.100.200", "Alibaba"},
		{"192.0.0.192", "Oracle"},
		{"168.63.129.16", "Azure"},
		{"fd20:ce::254", "GCP"},
		{"::ffff:169.254.169.254", "169.254.169.254"},
		{"::ffff:a9fe:a9fe", "169.254.169.254"},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{"64:ff9b::169.254.169.254", "169.254.169.254"},
		{"64:ff9b::6464:64c8", "100.100.100.200"},
		{"::a9fe:a9fe", "169.254.169.254"},
		{"2002:a9fe:a9fe::1", "169.254.169.254"},
		{"::ffff:100.100.100.200", "Alibaba"},
	}
	for _, allow := range broadEntries {
		for _, a := range addrs {
			t.Run(fmt.Sprint(allow, " ", a.addr), func(t *testing.T) {
				p, err := New(config.Targets{Allow: allow, Names: testNames}, Options{LookupIP: fakeDNS(t, map[string][]string{"vllm.test": {a.addr}})})
				if err != nil {
					t.Fatal(err)
				}
				lit := netip.MustParseAddr(a.addr)
				for _, u := range []string{"http://" + netip.AddrPortFrom(lit, 80).String() + "/", "http://vllm.test:80/"} {
					pu, _ := url.Parse(u)
					assertRefused(t, p.CheckURL(context.Background(), pu), a.want)
					_, err := get(context.Background(), p.Client(2*time.Second), u)
					assertRefused(t, err, a.want)
				}
			})
		}
	}
}

// TestSpellingsCannotEscapeTheList: an address spelled as IPv4-mapped or NAT64
// is checked as the IPv4 address it reaches: ::/0 does not admit loopback or a
// private IPv4 address through 64:ff9b::/96 or ::ffff:0:0/96.
func TestSpellingsCannotEscapeTheList(t *testing.T) {
	p, err := New(config.Targets{Allow: []string{"::/0"}}, Options{LookupIP: fakeDNS(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, lit := range []string{"[::ffff:127.0.0.1]:8000", "[64:ff9b::7f00:1]:8000", "[64:ff9b::a01:203]:8000", "[2002:a01:203::1]:8000"} {
		u, _ := url.Parse("http://" + lit + "/")
		assertRefused(t, p.CheckURL(context.Background(), u), "not on the allow-list")
	}
	// And the other way round: an IPv4 entry admits the IPv4 address however spelled.
	p4, err := New(config.Targets{Allow: []string{"10.0.0.0/8"}}, Options{LookupIP: fakeDNS(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://[64:ff9b::a01:203]:8000/")
	if err := p4.CheckURL(context.Background(), u); err != nil {
		t.Fatalf("NAT64 spelling of an allowed IPv4 address refused: %v", err)
	}
}

// TestMetadataAllowedOnlyByAnExactEntry: the one way to reach a metadata
// address is an entry naming that address; a CIDR around it, a name resolving
// to it or a scraped instance do not.
func TestMetadataAllowedOnlyByAnExactEntry(t *testing.T) {
	cases := []struct {
		name  string
		allow []string
		url   string
		ok    bool
	}{
		{"exact v6", []string{"fd00:ec2::254"}, "http://[fd00:ec2::254]/latest/", true},
		{"exact with port", []string{"100.100.100.200:80"}, "http://100.100.100.200/latest/", true},
		{"exact v4 admits its NAT64 spelling", []string{"169.254.169.254"}, "http://[64:ff9b::a9fe:a9fe]/", true},
		{"mapped entry is the v4 address", []string{"::ffff:100.100.100.200"}, "http://100.100.100.200/", true},
		{"CIDR around it", []string{"100.100.100.0/24"}, "http://100.100.100.200/", false},
		{"link-local /16 is not exact", []string{"169.254.0.0/16"}, "http://169.254.169.254/", false},
		{"name entry resolving to it", []string{"meta.test"}, "http://meta.test/", false},
		{"name entry resolving to link-local", []string{"meta.test"}, "http://meta.test:8000/", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dns := fakeDNS(t, map[string][]string{"meta.test": {"100.100.100.200", "169.254.10.1"}})
			p, err := New(config.Targets{Allow: c.allow}, Options{LookupIP: dns})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(c.url)
			err = p.CheckURL(context.Background(), u)
			if c.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.ok {
				assertRefused(t, err)
			}
		})
	}
}

// TestDialCheckSeesTheResolvedMetadataAddress: the connect-time check (the
// dialer's Control hook) refuses a name entry whose DNS answer changed to a
// metadata address after CheckURL passed, and connects nowhere.
func TestDialCheckSeesTheResolvedMetadataAddress(t *testing.T) {
	srv, accepts := countingServer(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	answers := [][]netip.Addr{{netip.MustParseAddr("127.0.0.1")}, {netip.MustParseAddr("::ffff:100.100.100.200")}}
	calls := 0
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "vllm.test" {
			t.Errorf("unexpected lookup %q", host)
		}
		a := answers[min(calls, 1)]
		calls++
		return a, nil
	}
	p, err := New(config.Targets{Allow: []string{"vllm.test"}}, Options{LookupIP: lookup})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://vllm.test:" + port + "/")
	if err := p.CheckURL(context.Background(), u); err != nil {
		t.Fatalf("first answer refused: %v", err)
	}
	c := p.Client(2 * time.Second)
	_, err = get(context.Background(), c, u.String())
	assertRefused(t, err, "vllm.test", "Alibaba")
	if accepts.Load() != 0 {
		t.Fatalf("%d connections made", accepts.Load())
	}
}

// TestScrapedInstanceNeverExemptsMetadata: an instance Prometheus scrapes is
// an allow entry, but not one that can name a metadata or link-local address
// (only the daemon config can); a scraped name resolving there is refused too.
func TestScrapedInstanceNeverExemptsMetadata(t *testing.T) {
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[`+
			`{"metric":{"instance":"169.254.169.254:80"},"value":[1,"1"]},`+
			`{"metric":{"instance":"[fd00:ec2::254]:80"},"value":[1,"1"]},`+
			`{"metric":{"instance":"meta.test:80"},"value":[1,"1"]},`+
			`{"metric":{"instance":"vllm.test:8000"},"value":[1,"1"]}]}}`)
	}))
	defer prom.Close()
	p, err := New(config.Targets{FromPrometheus: true}, Options{PrometheusURL: prom.URL,
		LookupIP: fakeDNS(t, map[string][]string{"meta.test": {"64:ff9b::6464:64c8"}, "vllm.test": {"10.0.0.9"}})})
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://meta.test/"} {
		u, _ := url.Parse(raw)
		assertRefused(t, p.CheckURL(context.Background(), u))
	}
	u, _ := url.Parse("http://vllm.test:8000/metrics")
	if err := p.CheckURL(context.Background(), u); err != nil {
		t.Fatalf("ordinary scraped instance refused: %v", err)
	}
}
