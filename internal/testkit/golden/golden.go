// Package golden holds a generated file (a reference page, a rendered
// chart) to what its generator writes today, as the tests that keep docs and
// goldens current do.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check writes got to path when update is set; otherwise it fails t when the
// file differs, naming the first line that does and how to regenerate it
// (regen: the command that rewrites it, with its -update flag).
func Check(t testing.TB, path string, got []byte, update bool, regen string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with %s)", err, regen)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	line := func(l []string) string {
		if i < len(l) {
			return l[i]
		}
		return "(end of file)"
	}
	t.Errorf("%s is stale (rerun %s); first difference at line %d:\nfile:      %s\ngenerated: %s",
		path, regen, i+1, line(wl), line(gl))
}
