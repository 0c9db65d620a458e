package config

import (
	"testing"
	"time"
)

func TestStormDefaultsAndSettings(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("notify:\n  console: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.Storm != (Storm{Threshold: 10, Window: time.Minute}) {
		t.Fatalf("defaults %+v, want threshold 10, window 1m", cfg.Notify.Storm)
	}
	cfg, err = Parse("c.yaml", []byte("notify:\n  storm: {threshold: 50, window: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.Storm != (Storm{Threshold: 50}) {
		t.Fatalf("settings %+v, want threshold 50, fleets off", cfg.Notify.Storm)
	}
}

func TestStormValidationNamesLines(t *testing.T) {
	checkParseErrors(t, []parseErrCase{
		{"threshold", "notify:\n  storm:\n    threshold: 0\n", []string{"c.yaml:3:16: notify.storm.threshold: must be at least 1"}},
		{"negative window", "notify:\n  storm:\n    window: -1s\n", []string{"c.yaml:3:13: notify.storm.window: must not be negative"}},
		{"long window", "notify:\n  storm:\n    threshold: 5\n    window: 2h\n", []string{"c.yaml:4:13: notify.storm.window: at most 1h"}},
	}, nil)
}
