package main

import (
	"io"
	"runtime/debug"

	"github.com/prometheus/common/version"
)

// The build's version, as Prometheus' own binaries report it
// (github.com/prometheus/common/version): a release build sets it with
//
//	-ldflags "-X github.com/prometheus/common/version.Version=1.2.0
//	          -X github.com/prometheus/common/version.Revision=<commit>
//	          -X github.com/prometheus/common/version.Branch=main
//	          -X github.com/prometheus/common/version.BuildDate=<RFC 3339>"
//
// and a plain go build or go install falls back to what the Go toolchain
// recorded (the module version, the VCS revision and its time), so a
// binary never reports an empty version.
func init() {
	register("version", command{summary: "print the version, revision, branch, build date and Go version", run: runVersion})
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	fillVersion(bi)
}

// fillVersion fills what the linker left empty from the build info.
func fillVersion(bi *debug.BuildInfo) {
	if version.Version == "" {
		switch v := bi.Main.Version; v {
		case "", "(devel)":
			version.Version = "devel"
		default:
			version.Version = v
		}
	}
	if version.BuildDate == "" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.time" {
				version.BuildDate = s.Value
			}
		}
	}
	if version.BuildDate == "" {
		version.BuildDate = "unknown"
	}
	if version.Branch == "" {
		version.Branch = "unknown" // the toolchain does not record it
	}
	if version.BuildUser == "" {
		version.BuildUser = "unknown"
	}
}

// versionText is what `autocapture version` and every --version print.
func versionText() string { return version.Print("autocapture") }

func runVersion(args []string, stdout, stderr io.Writer) int {
	f := newFlags("version", "", stdout, stderr)
	if code, done := f.parse(args); done {
		return code
	}
	if f.NArg() > 0 {
		f.Usage()
		return 2
	}
	io.WriteString(stdout, versionText()+"\n") //nolint:errcheck // stdout
	return 0
}
