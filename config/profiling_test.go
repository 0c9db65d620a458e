package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProfilingDefaultsAndSettings(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("log: {level: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Profiling
	if p.MaxConcurrent != 1 || p.MaxPerHour != 6 || p.MaxDuration != 30*time.Second ||
		p.SweepInterval != 10*time.Second || p.StopTimeout != 10*time.Minute || p.CollectWindow != 5*time.Minute {
		t.Fatalf("defaults %+v", p)
	}
	if n, v := p.OptOutLabel(); n != "autocapture_profile" || v != "off" {
		t.Fatalf("default opt-out label %q=%q, want autocapture_profile=off", n, v)
	}
	cfg, err = Parse("c.yaml", []byte(`profiling:
  max_concurrent: 3
  max_per_hour: 20
  max_duration: 10s
  sweep_interval: 2s
  stop_timeout: 30m
  collect_window: 90s
  opt_out: {targets: ["10.0.0.5:8000", "http://vllm-0.vllm:8000"], label: "profile=never"}
  agent_token: s3cret-token
`))
	if err != nil {
		t.Fatal(err)
	}
	p = cfg.Profiling
	if p.MaxConcurrent != 3 || p.MaxPerHour != 20 || p.MaxDuration != 10*time.Second ||
		p.SweepInterval != 2*time.Second || p.StopTimeout != 30*time.Minute || p.CollectWindow != 90*time.Second ||
		len(p.OptOut.Targets) != 2 {
		t.Fatalf("settings %+v", p)
	}
	if n, v := p.OptOutLabel(); n != "profile" || v != "never" {
		t.Fatalf("opt-out label %q=%q", n, v)
	}
	if p.AgentToken.Reveal() != "s3cret-token" || strings.Contains(p.AgentToken.String(), "s3cret") {
		t.Fatalf("agent token %q not kept or not hidden", p.AgentToken.String())
	}
	cfg, err = Parse("c.yaml", []byte("profiling:\n  opt_out: {label: \"\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := cfg.Profiling.OptOutLabel(); n != "" {
		t.Fatalf("an empty label opts out by %q", n)
	}
}

func TestProfilingAgentTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte("  from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("c.yaml", []byte("profiling:\n  agent_token_file: "+good+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profiling.AgentToken.Reveal() != "from-a-file" {
		t.Fatalf("token %q from the file, want it trimmed", cfg.Profiling.AgentToken.Reveal())
	}
	checkParseErrors(t, []parseErrCase{
		{"empty file", "profiling:\n  agent_token_file: " + empty + "\n",
			[]string{"c.yaml:2:21: profiling.agent_token_file:", "is empty or holds only whitespace"}},
		{"unreadable file", "profiling:\n  agent_token_file: " + filepath.Join(dir, "missing") + "\n",
			[]string{"c.yaml:2:21: profiling.agent_token_file:", "no such file"}},
		{"both", "profiling:\n  agent_token: x\n  agent_token_file: " + good + "\n",
			[]string{"agent_token and agent_token_file are both set"}},
	}, func(t *testing.T, err error) {
		if strings.Contains(err.Error(), "from-a-file") {
			t.Errorf("error shows the secret: %v", err)
		}
	})
}

func TestProfilingValidationNamesLines(t *testing.T) {
	checkParseErrors(t, []parseErrCase{
		{"no concurrency", "profiling:\n  max_concurrent: 0\n", []string{"c.yaml:2:19: profiling.max_concurrent: must be at least 1"}},
		{"no starts", "profiling:\n  max_per_hour: 0\n", []string{"c.yaml:2:17: profiling.max_per_hour: must be at least 1"}},
		{"long frame", "profiling:\n  max_duration: 10m\n", []string{"c.yaml:2:17: profiling.max_duration: 10m0s: want more than 0 and at most 5m0s"}},
		{"zero frame", "profiling:\n  max_duration: 0s\n", []string{"profiling.max_duration: 0s"}},
		{"slow sweeper", "profiling:\n  sweep_interval: 5m\n", []string{"c.yaml:2:19: profiling.sweep_interval: 5m0s: want 100ms to 1m"}},
		{"short stop", "profiling:\n  stop_timeout: 10ms\n", []string{"c.yaml:2:17: profiling.stop_timeout: 10ms: want at least 1s"}},
		{"short collect window", "profiling:\n  collect_window: 0s\n", []string{"c.yaml:2:19: profiling.collect_window: 0s: want 1s to 1h"}},
		{"long collect window", "profiling:\n  collect_window: 2h\n", []string{"profiling.collect_window: 2h0m0s: want 1s to 1h"}},
		{"bad target", "profiling:\n  opt_out:\n    targets: [\"ftp://x:1\", \"\"]\n",
			[]string{"profiling.opt_out.targets[0]: want host:port", "profiling.opt_out.targets[1]: want host:port"}},
		{"bad label", "profiling:\n  opt_out: {label: \"off\"}\n", []string{"profiling.opt_out.label: want name=value"}},
		{"bad label name", "profiling:\n  opt_out: {label: \"a-b=off\"}\n", []string{"profiling.opt_out.label: want name=value"}},
		{"unknown field", "profiling:\n  max_concurent: 2\n", []string{"c.yaml:2:3:", "max_concurent"}},
	}, nil)
}
