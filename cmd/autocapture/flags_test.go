package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/version"
)

// TestHelpAndVersionExitZero: asking for help or the version is not an
// error, on the top level and on every subcommand; the top-level listing is
// one aligned column; no command at all is a usage error.
func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, _ := cli(args...)
		if code != 0 {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		col := -1
		for _, line := range strings.Split(out, "\n") {
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "  "), " ")
			if _, known := commands[name]; !ok || !strings.HasPrefix(line, "  ") || !known {
				continue
			}
			// The summary starts where the first one did.
			at := len(line) - len(strings.TrimLeft(line[2+len(name):], " "))
			if col == -1 {
				col = at
			}
			if at != col {
				t.Errorf("%q: %q's summary starts at column %d, the first at %d:\n%s", args, name, at, col, out)
			}
		}
		if col == -1 || !strings.Contains(out, "healthcheck") || !strings.Contains(out, "version") {
			t.Errorf("%q: no command listing on stdout:\n%s", args, out)
		}
	}
	if code, _, errOut := cli(); code != 2 || !strings.Contains(errOut, "usage:") {
		t.Errorf("no arguments: exit %d, stderr %q; want 2 with the usage", code, errOut)
	}

	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		code, _, errOut := cli(n, "--help")
		if code != 0 || !strings.Contains(errOut, "usage: autocapture "+n) || !strings.Contains(errOut, "-version") {
			t.Errorf("%s --help: exit %d, stderr:\n%s\nwant 0 with its usage and flags", n, code, errOut)
		}
		code, out, _ := cli(n, "--version")
		if code != 0 || !strings.HasPrefix(out, "autocapture, version ") {
			t.Errorf("%s --version: exit %d, stdout %q; want 0 and the version", n, code, out)
		}
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		code, out, _ := cli(args...)
		if code != 0 || !strings.HasPrefix(out, "autocapture, version ") || !strings.Contains(out, "go version:       "+runtime.Version()) {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant 0 and the version with the Go version", args, code, out)
		}
	}
	if code, _, _ := cli("version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestVersionFromBuildInfo: what the linker did not set comes from what the
// Go toolchain recorded; what it set is kept.
func TestVersionFromBuildInfo(t *testing.T) {
	saved := [...]string{version.Version, version.BuildDate, version.Branch, version.BuildUser}
	t.Cleanup(func() {
		version.Version, version.BuildDate, version.Branch, version.BuildUser = saved[0], saved[1], saved[2], saved[3]
	})
	reset := func() { version.Version, version.BuildDate, version.Branch, version.BuildUser = "", "", "", "" }

	reset()
	fillVersion(&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}})
	if version.Version != "v1.4.0" || version.BuildDate != "2026-12-01T10:00:00Z" || version.Branch != "unknown" || version.BuildUser != "unknown" {
		t.Errorf("go install @v1.4.0: version %q date %q branch %q user %q", version.Version, version.BuildDate, version.Branch, version.BuildUser)
	}

	reset()
	fillVersion(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
	if version.Version != "devel" || version.BuildDate != "unknown" {
		t.Errorf("plain go build: version %q date %q, want devel and unknown", version.Version, version.BuildDate)
	}

	reset()
	version.Version, version.BuildDate, version.Branch = "1.5.0", "2026-12-02", "release-1.5"
	fillVersion(&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-x"}, Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "2020-01-01T00:00:00Z"}}})
	if version.Version != "1.5.0" || version.BuildDate != "2026-12-02" || version.Branch != "release-1.5" {
		t.Errorf("release build: version %q date %q branch %q, want the linker's", version.Version, version.BuildDate, version.Branch)
	}
}

// TestRenamedFlagsStillWork: an old flag name sets the new flag's value for
// one release and says, on stderr, what to write instead; the new name says
// nothing.
func TestRenamedFlagsStillWork(t *testing.T) {
	parse := func(args ...string) (dir, listen, stderr string, code int, done bool) {
		var out, errOut bytes.Buffer
		f := newFlags("agent", "", &out, &errOut)
		f.StringVar(&dir, "profiler.dir", "", "")
		f.StringVar(&listen, "web.listen-address", ":9101", "")
		f.alias("dir", "profiler.dir")
		f.alias("listen", "web.listen-address")
		code, done = f.parse(args)
		return dir, listen, errOut.String(), code, done
	}
	dir, listen, stderr, code, done := parse("--dir", "/p", "--listen=:1")
	if done || code != 0 || dir != "/p" || listen != ":1" {
		t.Fatalf("old names: dir %q listen %q code %d done %v", dir, listen, code, done)
	}
	for _, want := range []string{"agent: --dir is deprecated: use --profiler.dir", "agent: --listen is deprecated: use --web.listen-address"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, _, stderr, _, _ := parse("--profiler.dir", "/p", "--web.listen-address", ":1"); stderr != "" {
		t.Errorf("new names printed %q, want nothing", stderr)
	}
	if _, _, stderr, code, done := parse("--nope"); !done || code != 2 || !strings.Contains(stderr, "flag provided but not defined: -nope") {
		t.Errorf("unknown flag: code %d done %v stderr %q, want 2 naming it", code, done, stderr)
	}

	// The same through the real commands: the demo's --dir is --storage.path,
	// and a bad value given by the old name is refused as the new one is.
	code, _, errOut := cli("demo", "--dir", "/x", "--scenario", "nonesuch")
	if code != 2 || !strings.Contains(errOut, "--dir is deprecated: use --storage.path") || !strings.Contains(errOut, `--scenario "nonesuch"`) {
		t.Errorf("demo --dir: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestServeLogFlags: serve's --log.level and --log.format override the
// config's log: section, and a bad value is refused naming the key.
func TestServeLogFlags(t *testing.T) {
	cfg, err := serveConfig(serveFlags{logLevel: "debug", logFormat: "console"})
	if err != nil || cfg.Log.Level != "debug" || cfg.Log.Format != "console" {
		t.Fatalf("--log.level debug --log.format console: %v, %+v", err, cfg)
	}
	if _, err := serveConfig(serveFlags{logLevel: "loud"}); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("--log.level loud: %v, want an error naming log.level", err)
	}
	if code, _, errOut := cli("serve", "--log.format", "xml"); code != 1 || !strings.Contains(errOut, "log.format") {
		t.Errorf("serve --log.format xml: exit %d, stderr %q; want 1 naming log.format", code, errOut)
	}
}

// TestCheckWarnsOfSlackLeftOff: a Slack block with a token and a channel but
// not enabled loads (exit 0), and check says Slack is off and what to set.
func TestCheckWarnsOfSlackLeftOff(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("notify:\n  slack:\n    token: xoxb-1\n    channel: C0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("check", "--config.file", cfg)
	if code != 0 || !strings.HasPrefix(out, "ok:") {
		t.Fatalf("check: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
	}
	if want := cfg + ": warning: notify.slack has a token and a channel but enabled is not true"; !strings.Contains(errOut, want) || strings.Contains(errOut, "xoxb-1") {
		t.Errorf("stderr %q: want %q, and never the token", errOut, want)
	}
}
