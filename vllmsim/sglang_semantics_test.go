package vllmsim

import (
	"math"
	"strings"
	"testing"
	"time"
)

// quietSGLang is an SGLang sim of era with no built-in load: only the
// requests a test adds reach its engine.
func quietSGLang(t *testing.T, era string) *Sim {
	t.Helper()
	s, err := New(Options{Engine: EngineSGLang, SGLangEra: era, Load: NoLoad, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// addRequest puts one request straight into the engine: prompt tokens,
// exactly out output tokens, streamed or not, giving up after timeout (0:
// never).
func addRequest(s *Sim, prompt, out int, stream bool, timeout time.Duration) *request {
	r := &request{id: "req-test", prompt: prompt, target: out, maxTokens: out, client: -1, stream: stream, params: requestParams{n: 1}}
	s.mu.Lock()
	if timeout > 0 {
		r.deadline = s.eng.now + timeout
	}
	s.eng.add(r)
	s.mu.Unlock()
	return r
}

func histCount(h hist) float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// TestSGLangGaugesAreLogPointSnapshots (SGLANG.md §1): the scheduler gauges
// are written at log points only. After a lone request finishes, 0.4 keeps
// showing it running for good (no idle refresh); 2026 rewrites the gauges
// within 30 s of going idle, and not before.
func TestSGLangGaugesAreLogPointSnapshots(t *testing.T) {
	for _, era := range []string{SGLangEra04, SGLangEra2026} {
		t.Run(era, func(t *testing.T) {
			s := quietSGLang(t, era)
			if got := sglValue(s, "sglang:num_running_reqs", "", ""); got != 0 {
				t.Fatalf("a fresh server shows %v running", got)
			}
			r := addRequest(s, 200, 120, true, 0)
			s.Advance(10 * time.Second)
			if !r.done() {
				t.Fatalf("the request did not finish in 10 s")
			}
			st := s.State()
			stale := sglValue(s, "sglang:num_running_reqs", "", "")
			t.Logf("finished; engine running %d, gauge %v", st.Running, stale)
			if st.Running != 0 || stale != 1 {
				t.Fatalf("after the finish: engine %d running, gauge %v; want the gauge stuck at 1 (its last log point)", st.Running, stale)
			}
			s.Advance(15 * time.Second) // 25 s after the start: no log point yet
			if got := sglValue(s, "sglang:num_running_reqs", "", ""); got != 1 {
				t.Errorf("era %s rewrote num_running_reqs (%v) before any log point", era, got)
			}
			s.Advance(50 * time.Second)
			got := sglValue(s, "sglang:num_running_reqs", "", "")
			switch era {
			case SGLangEra04:
				if got != 1 {
					t.Errorf("0.4 has no idle refresh; num_running_reqs %v after 65 s idle, want the stale 1", got)
				}
			case SGLangEra2026:
				if got != 0 {
					t.Errorf("2026 writes idle metrics every 30 s; num_running_reqs still %v after 65 s idle", got)
				}
			}
		})
	}
}

// TestSGLangNonStreamedTTFT (SGLANG.md §4): a non-streamed request's output
// reaches the tokenizer every 50 tokens or at finish, so its TTFT is ≈ e2e
// when it is short and the time to 50 tokens when it is long; a streamed
// one's is its first token. The ITL histogram is token-weighted: its count
// is the tokens after the first chunk, its sum the time they took.
func TestSGLangNonStreamedTTFT(t *testing.T) {
	cases := []struct {
		name          string
		out           int
		stream        bool
		ttftIsE2E     bool
		itlTokens     float64
		firstChunkTok int
	}{
		{"non-streamed short", 30, false, true, 0, 30},
		{"non-streamed long", 120, false, false, 70, 50},
		{"streamed", 120, true, false, 119, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := quietSGLang(t, SGLangEra2026)
			r := addRequest(s, 300, tc.out, tc.stream, 0)
			var tokenAt []time.Duration // when each token was sampled
			for !r.done() {
				before := r.generated
				s.Advance(time.Millisecond)
				if r.generated > before {
					tokenAt = append(tokenAt, s.eng.now)
				}
			}
			label := streamLabel(r)
			ttft := sglHist(s, "sglang:time_to_first_token_seconds", "is_streaming", label)
			e2e := sglHist(s, "sglang:e2e_request_latency_seconds", "is_streaming", label)
			itl := sglHist(s, "sglang:inter_token_latency_seconds", "", "")
			if histCount(ttft) != 1 || histCount(e2e) != 1 {
				t.Fatalf("TTFT count %v, e2e count %v under is_streaming=%s; want 1 each", histCount(ttft), histCount(e2e), label)
			}
			want := (tokenAt[tc.firstChunkTok-1] - r.arrival).Seconds()
			if math.Abs(ttft.sum-want) > 0.0011 {
				t.Errorf("TTFT %.4f s, want %.4f (token %d reaching the tokenizer)", ttft.sum, want, tc.firstChunkTok)
			}
			if tc.ttftIsE2E != (math.Abs(ttft.sum-e2e.sum) < 1e-9) {
				t.Errorf("TTFT %.4f, e2e %.4f: TTFT = e2e should be %v", ttft.sum, e2e.sum, tc.ttftIsE2E)
			}
			if histCount(itl) != tc.itlTokens {
				t.Errorf("ITL count %v, want %v tokens after the first chunk", histCount(itl), tc.itlTokens)
			}
			if tc.itlTokens > 0 {
				span := (tokenAt[len(tokenAt)-1] - tokenAt[tc.firstChunkTok-1]).Seconds()
				if math.Abs(itl.sum-span) > 0.0011 {
					t.Errorf("ITL sum %.4f s, want the %.4f s from the first chunk to the last token", itl.sum, span)
				}
			}
		})
	}
}

// TestSGLangAbortsCount (SGLANG.md §4, §7): an aborted request bumps
// num_aborted_requests_total and also counts in num_requests_total and e2e;
// one aborted before producing a chunk adds no TTFT. Retractions are
// counted by the 2026 counter and the per-window gauge (with its pid label).
func TestSGLangAbortsCount(t *testing.T) {
	s := quietSGLang(t, SGLangEra2026)
	r := addRequest(s, 200, 400, false, time.Second) // non-streamed: no chunk before token 50
	s.Advance(5 * time.Second)
	if r.reason != reasonAbort || r.generated == 0 || r.generated >= sglangForceStreamInterval {
		t.Fatalf("reason %q after %d tokens: the test needs an abort mid-generation before token 50", r.reason, r.generated)
	}
	if got := sglValue(s, "sglang:num_aborted_requests_total", "", ""); got != 1 {
		t.Errorf("num_aborted_requests_total %v, want 1", got)
	}
	if got := sglValue(s, "sglang:num_requests_total", "is_streaming", "false"); got != 1 {
		t.Errorf("num_requests_total{is_streaming=false} %v, want 1: aborted requests count", got)
	}
	if n := histCount(sglHist(s, "sglang:e2e_request_latency_seconds", "", "")); n != 1 {
		t.Errorf("e2e count %v, want 1", n)
	}
	if n := histCount(sglHist(s, "sglang:time_to_first_token_seconds", "", "")); n != 0 {
		t.Errorf("TTFT count %v: the request never sent a chunk", n)
	}

	k, err := New(Options{Engine: EngineSGLang, Scenario: ScenarioKVPressure, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	maxGauge := 0.0
	for range 300 {
		k.Advance(100 * time.Millisecond)
		maxGauge = max(maxGauge, sglValue(k, "sglang:num_retracted_reqs", "", ""))
	}
	total := sglValue(k, "sglang:num_retracted_requests_total", "", "")
	if total == 0 || maxGauge == 0 || maxGauge > total {
		t.Errorf("retractions: counter %v, per-window gauge max %v; want both > 0 and the window below the total", total, maxGauge)
	}
	if !strings.Contains(scrape(t, k), `sglang:num_retracted_reqs{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pid="`) {
		t.Error("num_retracted_reqs lacks the pid label of a default-mode gauge")
	}
}

// TestSGLangEraSurfaces: each era prints its own names and not the others'
// (a vLLM name never), and a fresh server shows scheduler gauges but no
// TTFT, e2e or token families until a request finishes (SGLANG.md §1).
func TestSGLangEraSurfaces(t *testing.T) {
	for _, tc := range []struct {
		era       string
		has, lack []string
	}{
		{SGLangEra2026, []string{"sglang:num_queue_reqs{", "sglang:inter_token_latency_seconds_", `is_streaming="true"`, "tp_rank="},
			[]string{"sglang:time_per_output_token_seconds", "sglang:num_requests_waiting", "sglang:func_latency_seconds"}},
		{SGLangEra04, []string{"sglang:num_queue_reqs{", "sglang:time_per_output_token_seconds_", `sglang:func_latency_seconds_sum{name="generate_request"}`},
			[]string{"sglang:inter_token_latency_seconds", "engine_type", "is_streaming", "sglang:num_aborted_requests_total"}},
		{SGLangEra035, []string{"sglang:num_requests_waiting{name=", "sglang:waiting_request_latency_seconds_", "sglang:queue_req{"},
			[]string{"model_name=", "sglang:num_queue_reqs"}},
	} {
		t.Run(tc.era, func(t *testing.T) {
			fresh := scrape(t, quietSGLang(t, tc.era))
			if !strings.Contains(fresh, "sglang:token_usage{") {
				t.Error("a fresh server shows no scheduler gauges")
			}
			for _, f := range []string{"sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds", "sglang:prompt_tokens_total"} {
				if strings.Contains(fresh, f) {
					t.Errorf("a fresh server prints %s before any request", f)
				}
			}
			_, busy := busySGLang(t, tc.era, "meta-llama/Llama-3.1-8B-Instruct")
			for _, want := range tc.has {
				if !strings.Contains(busy, want) {
					t.Errorf("missing %q", want)
				}
			}
			for _, not := range append(tc.lack, "vllm:") {
				if strings.Contains(busy, not) {
					t.Errorf("prints %q, which era %s does not have", not, tc.era)
				}
			}
		})
	}
}

// TestSGLangExpositionIsDeterministic: the same seed and the same calls give
// byte-identical SGLang text (family and series order included); another
// seed gives other numbers.
func TestSGLangExpositionIsDeterministic(t *testing.T) {
	for _, era := range SGLangEras() {
		run := func(seed uint64) string {
			s, err := New(Options{Engine: EngineSGLang, SGLangEra: era, Scenario: ScenarioKVPressure, Seed: seed, Start: time.Unix(1.8e9, 0)})
			if err != nil {
				t.Fatal(err)
			}
			s.Advance(15 * time.Second)
			return scrape(t, s)
		}
		a, b, c := run(4), run(4), run(5)
		if a != b {
			t.Errorf("era %s: two runs with seed 4 differ", era)
		}
		if a == c {
			t.Errorf("era %s: seeds 4 and 5 print the same exposition", era)
		}
	}
}
