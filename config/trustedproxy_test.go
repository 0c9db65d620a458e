package config

import (
	"net/netip"
	"slices"
	"testing"
)

// TestTrustedProxyLoads: a header and addresses as written, parsed into
// prefixes (an address as itself, a mapped IPv4 as IPv4); off when absent;
// and it never counts as the webhook's auth.
func TestTrustedProxyLoads(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("web:\n  auth:\n    trusted_proxy:\n      header: X-Forwarded-Email\n"+
		"      from: [10.0.3.7, 10.42.0.0/16, '::ffff:192.168.1.0/120', 'fd00::/8']\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Web.Auth.TrustedProxy
	if p == nil || p.Header != "X-Forwarded-Email" {
		t.Fatalf("trusted_proxy = %+v", p)
	}
	got, err := p.Prefixes()
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.3.7/32"), netip.MustParsePrefix("10.42.0.0/16"),
		netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("fd00::/8")}
	if !slices.Equal(got, want) {
		t.Fatalf("prefixes %v, want %v", got, want)
	}
	if cfg.Web.Auth.Enabled() {
		t.Fatal("a trusted proxy alone counts as the webhook's auth")
	}
	if d, _ := Parse("c.yaml", []byte("web:\n  auth:\n    bearer_token: t\n")); d.Web.Auth.TrustedProxy != nil {
		t.Fatal("a trusted proxy by default")
	}
	// Beyond loopback it does not stand in for web.auth.
	_, err = Parse("c.yaml", []byte("web:\n  listen_address: 0.0.0.0:9095\n  auth:\n    trusted_proxy: {header: X-Forwarded-Email, from: [10.0.0.1]}\n"))
	if err == nil {
		t.Fatal("listening beyond loopback with only a trusted proxy was accepted")
	}
}

// TestTrustedProxyValidationNamesLines: every mistake at its line and column.
func TestTrustedProxyValidationNamesLines(t *testing.T) {
	head := "web:\n  auth:\n    trusted_proxy:\n"
	checkParseErrors(t, []parseErrCase{
		{"no header", head + "      from: [10.0.0.1]\n",
			[]string{"c.yaml:4:", "web.auth.trusted_proxy: header is required"}},
		{"empty header", head + "      header: ''\n      from: [10.0.0.1]\n",
			[]string{"c.yaml:4:15: web.auth.trusted_proxy.header: is empty: want the header your proxy sets"}},
		{"not a header name", head + "      header: 'X Email'\n      from: [10.0.0.1]\n",
			[]string{`c.yaml:4:15: web.auth.trusted_proxy.header: "X Email" is not a header name`}},
		{"a header clients set", head + "      header: x-forwarded-for\n      from: [10.0.0.1]\n",
			[]string{"c.yaml:4:15: web.auth.trusted_proxy.header: x-forwarded-for names no signed-in user"}},
		{"the API's credential", head + "      header: Authorization\n      from: [10.0.0.1]\n",
			[]string{"web.auth.trusted_proxy.header: Authorization names no signed-in user"}},
		{"no from", head + "      header: X-Forwarded-Email\n",
			[]string{"c.yaml:4:", "web.auth.trusted_proxy: from is required"}},
		{"bad CIDR", head + "      header: X-Forwarded-Email\n      from:\n        - 10.0.0.1\n        - 10.0.0.0/33\n",
			[]string{`c.yaml:7:11: web.auth.trusted_proxy.from[1]: bad CIDR "10.0.0.0/33"`}},
		{"not an address", head + "      header: X-Forwarded-Email\n      from: [proxy.internal]\n",
			[]string{`c.yaml:5:14: web.auth.trusted_proxy.from[0]: want an IP address or a CIDR, got "proxy.internal"`}},
		{"everyone", head + "      header: X-Forwarded-Email\n      from: ['0.0.0.0/0']\n",
			[]string{"c.yaml:5:14: web.auth.trusted_proxy.from[0]: 0.0.0.0/0 trusts every client to name itself"}},
		{"everyone v6", head + "      header: X-Forwarded-Email\n      from: ['::/0']\n",
			[]string{"web.auth.trusted_proxy.from[0]: ::/0 trusts every client"}},
		{"unknown key", head + "      header: X-Forwarded-Email\n      from: [10.0.0.1]\n      form: [10.0.0.2]\n",
			[]string{`unknown field "form"`}},
	}, nil)
}
