package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fatalRecorder is a testing.TB whose Fatalf and Skipf record instead of
// ending the test.
type fatalRecorder struct {
	testing.TB
	msg     string
	skipped bool
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func (f *fatalRecorder) Skipf(format string, args ...any) {
	f.msg, f.skipped = fmt.Sprintf(format, args...), true
	panic(f)
}

// toolRecorded calls Tool(rec, name) and returns what it recorded; ok is
// false when Tool returned instead of failing or skipping.
func toolRecorded(t *testing.T, name string) (rec *fatalRecorder, ok bool) {
	return recorded(t, func(tb testing.TB) { Tool(tb, name) })
}

// recorded calls f with a recorder and returns what it recorded; ok is false
// when f returned instead of failing or skipping.
func recorded(t *testing.T, f func(testing.TB)) (rec *fatalRecorder, ok bool) {
	rec = &fatalRecorder{TB: t}
	defer func() {
		if r := recover(); r != nil {
			if r != any(rec) {
				panic(r)
			}
			ok = true
		}
	}()
	f(rec)
	return rec, false
}

// withShort runs f with testenv's -short switch set to v. The tests calling
// it are not parallel, so no parallel test reads the switch meanwhile.
func withShort(t *testing.T, v bool, f func()) {
	saved := short
	short = func() bool { return v }
	defer func() { short = saved }()
	f()
}

func TestTool(t *testing.T) {
	tools := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tools, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(tools, "bin", "prometheus")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AUTOCAPTURE_TOOLS", tools)

	t.Run("AUTOCAPTURE_TOOLS wins over PATH", func(t *testing.T) {
		withShort(t, false, func() {
			if got := Tool(t, "prometheus"); got != fake {
				t.Errorf("Tool(prometheus) = %q, want %q", got, fake)
			}
		})
	})
	// These two find real components, so they skip under -short like any
	// other test that needs one.
	t.Run("postgres bin dir", func(t *testing.T) {
		if got, want := Tool(t, "initdb"), newestPostgresBin()+"/initdb"; got != want {
			t.Errorf("Tool(initdb) = %q, want %q", got, want)
		}
	})
	t.Run("PATH last", func(t *testing.T) {
		if got, want := Tool(t, "prometheus-alertmanager"), "/usr/bin/prometheus-alertmanager"; got != want {
			t.Errorf("Tool(prometheus-alertmanager) = %q, want %q", got, want)
		}
	})

	t.Run("missing fails, never skips", func(t *testing.T) {
		withShort(t, false, func() {
			rec, ok := toolRecorded(t, "no-such-tool-autocapture")
			want := "no-such-tool-autocapture not installed: run scripts/install-tools.sh"
			if !ok || rec.skipped || !strings.HasPrefix(rec.msg, want) {
				t.Errorf("Tool of a missing tool: stopped %v, skipped %v, message %q; want Fatalf with prefix %q",
					ok, rec.skipped, rec.msg, want)
			}
		})
	})

	t.Run("-short skips, installed or not", func(t *testing.T) {
		withShort(t, true, func() {
			for _, name := range []string{"prometheus", "no-such-tool-autocapture"} {
				rec, ok := toolRecorded(t, name)
				if !ok || !rec.skipped || !strings.Contains(rec.msg, name) {
					t.Errorf("Tool(%q) under -short: stopped %v, skipped %v, message %q; want a skip naming it",
						name, ok, rec.skipped, rec.msg)
				}
			}
			rec, ok := recorded(t, func(tb testing.TB) { BuildBinary(tb, "./internal/testkit/testenv/testdata/hello") })
			if !ok || !rec.skipped {
				t.Errorf("BuildBinary under -short: stopped %v, skipped %v, message %q; want a skip", ok, rec.skipped, rec.msg)
			}
		})
	})
}

func TestVersionLess(t *testing.T) {
	if !versionLess("9.6", "15") || versionLess("15", "9.6") || !versionLess("15", "16") {
		t.Error("postgres versions must sort numerically")
	}
}
