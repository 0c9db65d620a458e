package vllmsim

import "testing"

func TestOTLPHTTPEndpointGetsTracesPath(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"bare URL", "http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"root path", "http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"},
		{"own path kept", "http://collector:4318/custom/traces", "http://collector:4318/custom/traces"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := withTracesPath(c.in); got != c.want {
				t.Fatalf("withTracesPath(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
