package vllmsim

import (
	"fmt"
	"slices"
	"time"
)

// Scenario names, one per triage verdict id: each injects the cause its
// verdict names, so the symptoms a vLLM operator reads come out of the engine
// model rather than out of numbers written into gauges.
const (
	ScenarioHealthy      = "healthy"
	ScenarioOverload     = "overload"
	ScenarioKVPressure   = "kv-pressure"
	ScenarioPrefillBound = "prefill-bound"
	ScenarioDecodeBound  = "decode-bound"
	ScenarioClientAborts = "client-aborts"
	ScenarioUnexplained  = "unexplained"
	ScenarioGPUThrottled = "gpu-throttled"
)

// Dist is a clamped log-normal distribution of a positive quantity (tokens,
// seconds): Mean is the mean before clamping to [Min, Max]; Sigma the spread
// of the underlying normal (0 gives Mean every time).
type Dist struct {
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Sigma float64 `json:"sigma"`
}

// LoadSpec is the built-in load generator's traffic: open-loop Poisson
// arrivals at RPS plus Concurrency closed-loop clients (each sends its next
// request ThinkTime after the previous one finished).
type LoadSpec struct {
	RPS         float64 `json:"rps"`
	Concurrency int     `json:"concurrency"`
	// RampUp spreads the closed-loop clients' first requests over this
	// long (default 1s), as users arriving rather than a thundering herd.
	RampUp       time.Duration `json:"ramp_up_ns"`
	ThinkTime    time.Duration `json:"think_time_ns"`
	PromptTokens Dist          `json:"prompt_tokens"`
	OutputTokens Dist          `json:"output_tokens"`
	// MaxTokens is the max_tokens each request asks for; a request whose
	// sampled output reaches it finishes with reason "length", else "stop".
	MaxTokens int `json:"max_tokens"`
	// Timeout is the client's patience in seconds, from arrival: past it the
	// client aborts the request.
	Timeout Dist `json:"timeout_s"`
	// SharedPrefix is the length of a system prompt every request starts
	// with; with prefix caching its full blocks are cache hits.
	SharedPrefix int `json:"shared_prefix"`
}

// Scenario is one injected cause: the engine configuration it runs with, a
// kernel slowdown if any, and the load that makes it show.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// MaxNumSeqs, MaxNumBatchedTokens and NumGPUBlocks override the
	// engine's when non-zero.
	MaxNumSeqs          int `json:"max_num_seqs,omitempty"`
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	NumGPUBlocks        int `json:"num_gpu_blocks,omitempty"`
	// GEMMSlowdown multiplies the time of the GEMM kernels (the linear
	// layers of every forward pass): a kernel regression. 0 or 1 is none.
	GEMMSlowdown float64 `json:"gemm_slowdown,omitempty"`
	// Throttle names a clock event reason (ThrottleReasons) GPU 0 throttles
	// for while the scenario is in force: its SM clock falls, every GPU
	// kernel slows by max over actual clock, and the DCGM surface shows it.
	Throttle string   `json:"throttle,omitempty"`
	Load     LoadSpec `json:"load"`
}

// chatLoad is the everyday request mix: chat prompts of a few hundred tokens
// with a shared system prompt, answers of about a hundred.
var chatLoad = LoadSpec{
	PromptTokens: Dist{Mean: 350, Min: 64, Max: 1500, Sigma: 0.6},
	OutputTokens: Dist{Mean: 100, Min: 8, Max: 256, Sigma: 0.6},
	MaxTokens:    256,
	Timeout:      Dist{Mean: 120, Min: 120, Max: 120},
	SharedPrefix: 96,
}

func withLoad(base LoadSpec, f func(*LoadSpec)) LoadSpec {
	f(&base)
	return base
}

// scenarios is the registry: every scenario the sim knows, by name.
var scenarios = map[string]Scenario{
	ScenarioHealthy: {
		Name:        ScenarioHealthy,
		Description: "chat traffic well below capacity: no queue, narrow batch, no alert",
		// 2.5 req/s is ~60% of what 32 slots serve (~4.3 req/s at a full
		// batch's ~75 ms step). At 3 req/s (70%) Poisson bursts filled the
		// batch and queued: in 10 of 60 seeds' 10 minutes some first token
		// took over 2 s, a page under `for: 0s`; at 2.5, none did.
		Load: withLoad(chatLoad, func(l *LoadSpec) { l.RPS = 2.5 }),
	},
	ScenarioOverload: {
		Name:        ScenarioOverload,
		Description: "the same chat traffic arriving past the knee: the batch is full and the queue grows",
		Load:        withLoad(chatLoad, func(l *LoadSpec) { l.RPS = 14 }),
	},
	ScenarioKVPressure: {
		Name:         ScenarioKVPressure,
		Description:  "a KV pool too small (1024 blocks) for a team of long-context users: usage near 1, the newest requests preempted and recomputed",
		NumGPUBlocks: 1024,
		Load: withLoad(chatLoad, func(l *LoadSpec) {
			l.Concurrency = 16
			l.RampUp = 2 * time.Second
			l.ThinkTime = time.Second
			l.PromptTokens = Dist{Mean: 1000, Min: 500, Max: 2000, Sigma: 0.4}
			l.OutputTokens = Dist{Mean: 250, Min: 64, Max: 500, Sigma: 0.4}
			l.MaxTokens = 500
		}),
	},
	ScenarioPrefillBound: {
		Name:        ScenarioPrefillBound,
		Description: "a document pipeline: 4 workers sending long prompts (~5500 tokens) back to back; prefill time and TTFT up, the queue short in count",
		Load: withLoad(chatLoad, func(l *LoadSpec) {
			l.Concurrency = 4
			l.RampUp = 2 * time.Second
			l.ThinkTime = 500 * time.Millisecond
			l.PromptTokens = Dist{Mean: 5500, Min: 3000, Max: 7500, Sigma: 0.3}
			l.OutputTokens = Dist{Mean: 40, Min: 8, Max: 64, Sigma: 0.5}
			l.MaxTokens = 64
		}),
	},
	ScenarioDecodeBound: {
		Name:                ScenarioDecodeBound,
		Description:         "max-num-seqs raised to 256 (and the token budget to 2048) with 240 concurrent clients wanting long answers: a wide batch, slow inter-token latency, no queue",
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 2048,
		Load: withLoad(chatLoad, func(l *LoadSpec) {
			l.Concurrency = 240
			l.RampUp = 8 * time.Second
			l.ThinkTime = 200 * time.Millisecond
			l.PromptTokens = Dist{Mean: 120, Min: 32, Max: 400, Sigma: 0.5}
			l.OutputTokens = Dist{Mean: 300, Min: 64, Max: 600, Sigma: 0.4}
			l.MaxTokens = 600
			l.Timeout = Dist{Mean: 600, Min: 600, Max: 600}
		}),
	},
	ScenarioClientAborts: {
		Name:        ScenarioClientAborts,
		Description: "impatient clients (timeouts of a few seconds) asking for long answers: aborts mid-generation",
		Load: withLoad(chatLoad, func(l *LoadSpec) {
			l.RPS = 2.5
			l.OutputTokens = Dist{Mean: 220, Min: 40, Max: 512, Sigma: 0.6}
			l.MaxTokens = 512
			l.Timeout = Dist{Mean: 9, Min: 4, Max: 20, Sigma: 0.4}
		}),
	},
	ScenarioUnexplained: {
		Name:         ScenarioUnexplained,
		Description:  "a GEMM kernel regression (8x slower) under light everyday traffic: slow steps while queue, batch, prompts and KV stay normal",
		GEMMSlowdown: 8,
		Load:         withLoad(chatLoad, func(l *LoadSpec) { l.RPS = 0.5 }),
	},
	ScenarioGPUThrottled: {
		Name:        ScenarioGPUThrottled,
		Description: "everyday chat traffic on a GPU thermally throttled (sw_thermal: SM clock at 55% of max): every kernel 1.8x slower, queue, batch mix, prompts and KV normal",
		Throttle:    ThrottleSWThermal,
		// At healthy's 2.5 req/s the throttled engine (~2.3 req/s of
		// capacity) queues without bound, which reads as overload; at 2.0
		// the queue stays short while TTFT and ITL roughly double.
		Load: withLoad(chatLoad, func(l *LoadSpec) { l.RPS = 2.0 }),
	},
}

// Scenarios returns the names of the scenarios whose cause vLLM's own
// metrics show, one triage verdict id each, sorted. The GPU scenarios
// (GPUScenarios) are not among them: their cause needs the GPU's view.
func Scenarios() []string { return scenarioNames(false) }

// GPUScenarios returns the names of the scenarios whose cause is in the GPU
// (its DCGM surface shows it; vLLM's metrics show only "everything slower"),
// sorted.
func GPUScenarios() []string { return scenarioNames(true) }

// scenarioNames are the names of the GPU scenarios (gpu) or the others, sorted.
func scenarioNames(gpu bool) []string {
	var names []string
	for n, sc := range scenarios {
		if (sc.Throttle != "") == gpu {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// LookupScenario returns the scenario called name.
func LookupScenario(name string) (Scenario, error) {
	sc, ok := scenarios[name]
	if !ok {
		return Scenario{}, fmt.Errorf("unknown scenario %q (known: %v, %v)", name, Scenarios(), GPUScenarios())
	}
	return sc, nil
}
