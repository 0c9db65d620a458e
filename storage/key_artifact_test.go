package storage

import (
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestArtifactKeyLayoutAndHostileValues(t *testing.T) {
	started := time.Date(2026, 11, 30, 23, 59, 0, 0, time.FixedZone("CET", 3600)) // 22:59 UTC
	base := ArtifactPath{Started: started, Alertname: "VLLMHighTTFT", RunID: "r-123", Plan: "queue-deep", Step: "snapshot", File: "metrics.json"}
	if got, want := ArtifactKey(base), "2026/11/30/VLLMHighTTFT/r-123/queue-deep/snapshot/metrics.json"; got != want {
		t.Fatalf("ArtifactKey = %q, want %q", got, want)
	}
	hostile := []struct{ name, value string }{
		{"dotdot", "../../etc"},
		{"encoded dotdot", "%2e%2e"},
		{"encoded slash", "a%2Fb"},
		{"only dots", ".."},
		{"slash", "a/b"},
		{"backslash", `a\b`},
		{"control", "a\x00b\r\nc\x7f"},
		{"unicode", "模型"},
		{"rtl override", "abc\u202egpj.exe"},
		{"empty", ""},
		{"long", strings.Repeat("x", 5000)},
		{"long unicode", strings.Repeat("é", 3000)},
	}
	seen := map[string]string{}
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			for _, field := range []string{"alertname", "run", "plan", "step", "file"} {
				p := base
				switch field {
				case "alertname":
					p.Alertname = h.value
				case "run":
					p.RunID = h.value
				case "plan":
					p.Plan = h.value
				case "step":
					p.Step = h.value
				case "file":
					p.File = h.value
				}
				key := ArtifactKey(p)
				if err := ValidKey(key); err != nil {
					t.Fatalf("%s=%q: key %q invalid: %v", field, h.value, key, err)
				}
				segs := strings.Split(key, "/")
				if len(segs) != 8 {
					t.Fatalf("%s=%q: key %q has %d segments, want 8", field, h.value, key, len(segs))
				}
				for _, s := range segs {
					if len(s) > maxSegment || s == "." || s == ".." || strings.HasPrefix(s, ".") {
						t.Errorf("%s=%q: segment %q unsafe", field, h.value, s)
					}
					for _, r := range s {
						if r > unicode.MaxASCII || r < 0x20 || r == '%' || r == '\\' {
							t.Errorf("%s=%q: segment %q has %q", field, h.value, s, r)
						}
					}
				}
				if ArtifactKey(p) != key {
					t.Errorf("%s=%q: not deterministic", field, h.value)
				}
			}
			p := base
			p.Alertname = h.value
			k := ArtifactKey(p)
			if other, dup := seen[k]; dup {
				t.Errorf("%q and %q share key %q", h.value, other, k)
			}
			seen[k] = h.value
		})
	}
}

func TestArtifactKeyKeepsDistinctValuesApart(t *testing.T) {
	a := ArtifactPath{Alertname: "a/b", File: "x"}
	b := ArtifactPath{Alertname: "a_b", File: "x"}
	c := ArtifactPath{Alertname: "a:b", File: "x"}
	if ArtifactKey(a) == ArtifactKey(b) || ArtifactKey(a) == ArtifactKey(c) || ArtifactKey(b) == ArtifactKey(c) {
		t.Fatalf("collision: %q %q %q", ArtifactKey(a), ArtifactKey(b), ArtifactKey(c))
	}
}

func TestArtifactKeyAttemptAndRunFolder(t *testing.T) {
	started := time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("PST", -8*3600)) // 08:30 UTC
	p := ArtifactPath{Started: started, Alertname: "a/b", RunID: "r1", Plan: "p", Step: "s", File: "f.json"}
	first := ArtifactKey(p)
	p.Attempt = 1
	if ArtifactKey(p) != first {
		t.Fatalf("attempt 1 must keep the plain key %q, got %q", first, ArtifactKey(p))
	}
	p.Attempt = 3
	resumed := ArtifactKey(p)
	if resumed == first || !strings.HasSuffix(resumed, "/p/s/attempt-3/f.json") {
		t.Fatalf("attempt 3 key %q: want …/p/s/attempt-3/f.json, apart from %q", resumed, first)
	}
	prefix := RunPrefix(started, "a/b", "r1")
	if !strings.HasPrefix(prefix, "2026/12/01/a_b~") || !strings.HasSuffix(prefix, "/r1/") {
		t.Fatalf("RunPrefix = %q", prefix)
	}
	for _, k := range []string{first, resumed, ManifestKey(started, "a/b", "r1")} {
		if !strings.HasPrefix(k, prefix) {
			t.Errorf("%q is not under the run's folder %q", k, prefix)
		}
	}
	if other := RunPrefix(started, "a/b", "r10"); strings.HasPrefix(first, other) {
		t.Errorf("run r10's folder %q must not contain run r1's key %q", other, first)
	}
}
