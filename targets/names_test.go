package targets

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/vocab"
)

// testNames lets the tests that check a name's addresses against CIDRs
// resolve their *.test names.
var testNames = []string{"*.test"}

// countingDNS answers every name with 127.0.0.1 and records each query.
type countingDNS struct {
	mu      sync.Mutex
	queries []string
}

func (d *countingDNS) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries = append(d.queries, host)
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestRefusedNamesAreNeverResolved: a label's host that the policy cannot
// allow by name is refused before any DNS query, through CheckURL and
// through the client's dialer, so its text never reaches a resolver; names
// the config expects are still looked up and checked on their addresses.
func TestRefusedNamesAreNeverResolved(t *testing.T) {
	cfg := config.Default().Targets
	cfg.Allow = append(cfg.Allow, "10.0.0.0/8", "vllmsim:8000")
	cases := []struct {
		host     string
		resolved bool // a query is expected
	}{
		{"exfil-label-secret.attacker.example:80", false},
		{"secret.attacker.example.:80", false},
		{"svc:80", false}, // *.svc needs a label before .svc
		{"secretsvc.attacker.example:80", false},
		{"vllmsim:9000", false},           // named, but on another port
		{"127.0.0.1:1", false},            // a literal needs no lookup
		{"localhost:8000", true},          // a name entry
		{"vllmsim:8000", true},            // a name entry on its port
		{"vllm-0.vllm.ns.svc:8000", true}, // default *.svc
		{"VLLM.ns.svc.cluster.local:8000", true},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			dns := &countingDNS{}
			p, err := New(cfg, Options{LookupIP: dns.lookup})
			if err != nil {
				t.Fatal(err)
			}
			checkErr := p.CheckURL(context.Background(), &url.URL{Scheme: "http", Host: c.host})
			_, dialErr := p.Client(0).Get("http://" + c.host + "/")
			if !c.resolved {
				if len(dns.queries) != 0 {
					t.Fatalf("resolver queried %q for a name the policy refuses", dns.queries)
				}
				if !strings.HasPrefix(c.host, "127.") && (vocab.Classify(checkErr) != vocab.ReasonRefused || vocab.Classify(dialErr) != vocab.ReasonRefused ||
					!strings.Contains(checkErr.Error(), "before any DNS lookup")) {
					t.Fatalf("not refused by name: check %v; dial %v", checkErr, dialErr)
				}
				return
			}
			if len(dns.queries) == 0 {
				t.Fatalf("a name the config expects was not looked up (check %v)", checkErr)
			}
		})
	}
}

func TestNamePatterns(t *testing.T) {
	cases := []struct {
		pattern string
		matches []string
		misses  []string
	}{
		{"*.svc", []string{"a.svc", "vllm.ns.svc"}, []string{"svc", "asvc", "a.svc.evil.example"}},
		{"vllm.internal", []string{"vllm.internal"}, []string{"a.vllm.internal", "vllm.internal.example"}},
		{"*", []string{"anything.example", "x"}, nil},
	}
	for _, c := range cases {
		np, err := parseNamePattern(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.matches {
			if !np.matches(m) {
				t.Errorf("%q does not match %q", c.pattern, m)
			}
		}
		for _, m := range c.misses {
			if np.matches(m) {
				t.Errorf("%q matches %q", c.pattern, m)
			}
		}
	}
	for _, bad := range []string{"", "a.*.svc", "*x.svc", "10.0.0.0/8", "host:80"} {
		if _, err := New(config.Targets{Names: []string{bad}}, Options{}); err == nil || !strings.Contains(err.Error(), "names[0]") {
			t.Errorf("names: [%q] accepted (%v)", bad, err)
		}
	}
}
