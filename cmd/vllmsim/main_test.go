package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeRealTime starts the command on a loopback port and talks to it
// in real time: health, a completion that waits for the model's timing,
// the metrics it leaves behind, and a clean stop.
func TestServeRealTime(t *testing.T) {
	addrs, stop := startRun(t, "--web.listen-address", "127.0.0.1:0", "--load", "-1", "--model", "m", "--seed", "4",
		"--scenario", "overload", "--shift-after", "1h")
	base := "http://" + addrs.VLLM[0]
	get := func(path string) string { return httpGet(t, base+path) }
	get("/health")
	if st := get("/admin/scenario"); !strings.Contains(st, `"scenario":"healthy"`) || !strings.Contains(st, `"pending":{"scenario":"overload"`) {
		t.Errorf("--scenario overload --shift-after 1h: not healthy with the shift pending: %.600s", st)
	}
	begun := time.Now()
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":20}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(begun)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"text_completion"`) {
		t.Fatalf("completion: %s %s", resp.Status, b)
	}
	// 20 tokens at a ~30 ms step: the answer waited for the model.
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("completion took %v, want the model's timing (~0.5 s)", took)
	}
	if m := get("/metrics"); !strings.Contains(m, `vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0`+"\n") {
		t.Errorf("metrics do not count the request:\n%.2000s", m)
	}
	stop()
}

// startRun runs the command with args and returns what it serves once it
// is ready; stop ends it and checks it stopped cleanly.
func startRun(t *testing.T, args ...string) (addrs served, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ready := make(chan served, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, io.Discard, ready) }()
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	return addrs, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("did not stop")
		}
	}
}

// httpGet returns the body of url's 200 answer.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--shift-after", "10s"}, // healthy to healthy
		{"--scenario", "overload", "--shift-after", "-1s"},
		{"--otlp-protocol", "carrier-pigeon"},
		{"--profiler-start-while-flushing", "sometimes"},
		{"--profiler-layers", "-1"},
		{"--profiler-late-files", "-1s"},
		{"--engine", "tgi"},
		{"--sglang-era", "0.4"}, // without --engine sglang
		{"--engine", "sglang", "--sglang-era", "2027"},
		{"--engine", "sglang", "--legacy-metrics"},
		{"--no-such-flag"},
		{"stray"},
	} {
		if err := run(context.Background(), args, io.Discard, nil); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestProfilerFaultFlags(t *testing.T) {
	c, err := parseFlags([]string{"--profiler-dir", t.TempDir(), "--profiler-layers", "4", "--profiler-stop-hang", "3s",
		"--profiler-start-while-flushing", "ignore", "--profiler-late-files", "2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f := c.opts.ProfilerFaults
	if c.opts.ProfilerLayers != 4 || f.StopHang != 3*time.Second || f.StartWhileFlushing != "ignore" || f.LateFiles != 2*time.Second {
		t.Errorf("layers %d, faults %+v", c.opts.ProfilerLayers, f)
	}
}

// TestServeSGLang: --engine sglang serves SGLang's /metrics on the API's
// port, single and as a fleet (every instance), in the era asked for.
func TestServeSGLang(t *testing.T) {
	addrs, stop := startRun(t, "--web.listen-address", "127.0.0.1:0", "--load", "-1", "--model", "m", "--engine", "sglang")
	base := "http://" + addrs.VLLM[0]
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":20}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m := httpGet(t, base+"/metrics")
	if !strings.Contains(m, `sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="m"} 1.0`+"\n") || strings.Contains(m, "vllm:") {
		t.Errorf("--engine sglang: the request is not in SGLang's series, or vLLM's are there:\n%.1500s", m)
	}
	if v := httpGet(t, base+"/version"); !strings.Contains(v, `"0.5.23"`) {
		t.Errorf("/version %s: want the 2026 era's SGLang version", v)
	}
	stop()

	addrs, stop = startRun(t, "--fleet-listen", "127.0.0.1:0,127.0.0.1:0", "--load", "-1", "--model", "m",
		"--engine", "sglang", "--sglang-era", "0.4")
	for _, a := range addrs.VLLM {
		if m := httpGet(t, "http://"+a+"/metrics"); !strings.Contains(m, `sglang:num_queue_reqs{model_name="m"} 0.0`+"\n") {
			t.Errorf("fleet instance %s: not the 0.4 era's SGLang gauges:\n%.800s", a, m)
		}
	}
	stop()
}
