package vllmsim

import (
	"errors"
	"fmt"
	"math"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// NoLoad, as Options.Load, turns the built-in open-loop generator off (the
// scenario's closed-loop clients too): only HTTP requests reach the engine.
const NoLoad = -1

// EngineConfig is the simulated engine's fixed shape, the numbers vLLM takes
// as --max-num-seqs, --max-num-batched-tokens, --max-model-len and the KV
// pool it sizes at start. A scenario may override MaxNumSeqs and NumGPUBlocks.
type EngineConfig struct {
	MaxNumSeqs          int `json:"max_num_seqs"`
	MaxNumBatchedTokens int `json:"max_num_batched_tokens"`
	MaxModelLen         int `json:"max_model_len"`
	NumGPUBlocks        int `json:"num_gpu_blocks"`
	BlockSize           int `json:"block_size"`
	// NoPrefixCaching turns automatic prefix caching off (vLLM has it on).
	NoPrefixCaching bool `json:"no_prefix_caching"`
}

// DefaultEngine is a 7–8B model on one mid-range GPU: a 131k-token KV pool,
// 32 running slots, 512-token chunked prefill.
var DefaultEngine = EngineConfig{
	MaxNumSeqs:          32,
	MaxNumBatchedTokens: 512,
	MaxModelLen:         8192,
	NumGPUBlocks:        8192,
	BlockSize:           16,
}

// Options configure a Sim. The zero value is usable: every field has a
// default, applied by New.
type Options struct {
	// Model is the served model name (label model_name, /v1/models).
	Model string
	// Scenario is the cause injected at start; default "healthy".
	Scenario string
	// ShiftAfter, when > 0, starts with healthy traffic and shifts to
	// Scenario this long after the start (--shift-after): an incident's
	// onset rather than a sim born in it.
	ShiftAfter time.Duration
	// Load overrides the scenario's open-loop rate in requests per second:
	// 0 keeps the scenario's, NoLoad turns the generator off.
	Load float64
	// Concurrency overrides the scenario's closed-loop client count when > 0.
	Concurrency int
	// LoadScale multiplies the built-in load (open-loop rate and
	// closed-loop clients, after overrides and shape): an instance's share
	// of a fleet's traffic. 0 means 1.
	LoadScale float64
	// Seed makes runs deterministic: the same seed, options and Advance
	// calls give the same requests, timings and trace ids.
	Seed uint64
	// Engine is the serving engine whose observable surface the sim shows:
	// EngineVLLM (default) or EngineSGLang. The engine model and the
	// scenarios are the same for both; /metrics, the spans and /version
	// follow the engine named here.
	Engine string
	// SGLangEra is the SGLang metric generation exposed with EngineSGLang
	// (SGLangEras; default SGLangEra2026). The eras before 2026 export no
	// spans: SGLang had no tracing then.
	SGLangEra string
	// EngineConfig is the engine's shape; zero fields take DefaultEngine's.
	EngineConfig EngineConfig
	// LegacyMetrics exposes the pre-2026 metric generation
	// (gpu_cache_usage_perc, gpu_prefix_cache_*, time_per_output_token_seconds).
	LegacyMetrics bool
	// Version is what /version reports; default by generation.
	Version string

	// ServiceName is the OTel service.name of the spans; default "vllm-server".
	// With EngineSGLang it is always "sglang", which SGLang hard-codes
	// (SGLANG.md §6).
	ServiceName string
	// ResourceAttributes are extra OTel resource attributes of the spans, as an
	// operator sets OTEL_RESOURCE_ATTRIBUTES on a vLLM pod (for example
	// service.instance.id=<host:port>, which lets a trace search keep one instance).
	ResourceAttributes map[string]string
	// OTLPEndpoint, when set, receives one llm_request span per finished
	// request: "host:port" or a URL.
	OTLPEndpoint string
	// OTLPProtocol is "grpc" (vLLM's default) or "http/protobuf".
	OTLPProtocol string
	// SpanExporter, when set, receives the spans instead of OTLPEndpoint
	// (tests use an in-memory exporter).
	SpanExporter sdktrace.SpanExporter

	// ProfilerDir arms the profiler: /start_profile and /stop_profile exist
	// only when it is set, and trace files are written into it.
	ProfilerDir string
	// ProfilerFlushDelay is how long /stop_profile blocks before the files
	// are written; default 2s.
	ProfilerFlushDelay time.Duration
	// ProfilerMaxRecording is the longest a recording may run before it is
	// counted as a protocol violation; default 60s.
	ProfilerMaxRecording time.Duration
	// TensorParallel is the number of worker ranks, each writing its own
	// trace file; default 1.
	TensorParallel int
	// ProfilerLayers is how many decoder layers a rank's trace shows per
	// iteration (each ~11 kernels with their CPU ops, launches and flows);
	// default 32, the model's. Fewer make smaller files with the same
	// GPU-time mix.
	ProfilerLayers int
	// EnforceEager is vLLM's --enforce-eager: no CUDA graphs, every kernel
	// launched one by one. Off (the default, as vLLM V1 runs), a step of
	// decodes alone replays its decoder layers from one cudaGraphLaunch.
	EnforceEager bool
	// ProfilerGPU is the GPU a rank's trace shows, its device properties and
	// kernel names: GPUA10G (default, Ampere) or GPUB200 (Blackwell).
	ProfilerGPU string
	// ProfilerFaults are the profiler misbehaviours injected (none by
	// default); POST /admin/profiler/faults changes them at run time.
	ProfilerFaults ProfilerFaults
	// ProfilerExportRate is the bytes per second one rank's trace export
	// runs at when Engine is "sglang": SGLang's stop exports on the
	// scheduler thread and serving freezes meanwhile (SGLANG.md §5); default
	// DefaultSGLangExportRate. With "sglang", ProfilerDir is only the
	// default output_dir (SGLANG_TORCH_PROFILER_DIR; default the temp dir):
	// SGLang's profiler needs no arming.
	ProfilerExportRate float64

	// DCGM shapes the DCGM exporter surface (DCGMHandler).
	DCGM DCGMOptions
	// GPUFaults are injected at start (each after its own delay);
	// POST /admin/gpu/faults and SetGPUFaults change them at run time.
	GPUFaults []GPUFault

	// StepInterval is how often Run advances the engine in real time;
	// default 10ms.
	StepInterval time.Duration
	// MaxFinished bounds the finished requests kept for /admin/requests;
	// default 20000.
	MaxFinished int
	// Start is the simulated clock's origin; default time.Now().
	Start time.Time
	// Logger receives the sim's few log lines; default zap.NewNop().
	Logger *zap.Logger
}

// withDefaults returns o with every default applied, or an error naming the
// first field that cannot work.
func (o Options) withDefaults() (Options, error) {
	if o.Model == "" {
		o.Model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	if o.Scenario == "" {
		o.Scenario = ScenarioHealthy
	}
	if _, err := LookupScenario(o.Scenario); err != nil {
		return o, err
	}
	if o.ShiftAfter < 0 {
		return o, fmt.Errorf("shift after %v: want >= 0", o.ShiftAfter)
	}
	if o.ShiftAfter > 0 && o.Scenario == ScenarioHealthy {
		return o, fmt.Errorf("shift after %v: the sim starts healthy, name the scenario to shift to", o.ShiftAfter)
	}
	if o.LoadScale < 0 || o.LoadScale > 100 {
		return o, fmt.Errorf("load scale %v: want 0..100", o.LoadScale)
	}
	if o.Load < 0 && o.Load != NoLoad {
		return o, fmt.Errorf("load %v: want a rate >= 0 or NoLoad", o.Load)
	}
	o.EngineConfig = o.EngineConfig.withDefaults()
	if err := o.engineDefaults(); err != nil {
		return o, err
	}
	switch o.OTLPProtocol {
	case "":
		o.OTLPProtocol = "grpc"
	case "grpc", "http/protobuf":
	default:
		return o, fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", o.OTLPProtocol)
	}
	if o.ProfilerFlushDelay == 0 {
		o.ProfilerFlushDelay = 2 * time.Second
	}
	if o.ProfilerMaxRecording == 0 {
		o.ProfilerMaxRecording = 60 * time.Second
	}
	if o.TensorParallel == 0 {
		o.TensorParallel = 1
	}
	if o.ProfilerLayers == 0 {
		o.ProfilerLayers = 32
	}
	if o.ProfilerLayers < 1 || o.ProfilerLayers > 256 {
		return o, fmt.Errorf("profiler layers %d: want 1..256", o.ProfilerLayers)
	}
	switch o.ProfilerGPU {
	case "":
		o.ProfilerGPU = GPUA10G
	case GPUA10G, GPUB200:
	default:
		return o, fmt.Errorf("profiler gpu %q: want %s or %s", o.ProfilerGPU, GPUA10G, GPUB200)
	}
	if err := o.ProfilerFaults.validate(); err != nil {
		return o, err
	}
	if o.ProfilerExportRate == 0 {
		o.ProfilerExportRate = DefaultSGLangExportRate
	}
	if o.ProfilerExportRate < 0 || math.IsInf(o.ProfilerExportRate, 0) || math.IsNaN(o.ProfilerExportRate) {
		return o, fmt.Errorf("profiler export rate %v: want bytes per second > 0", o.ProfilerExportRate)
	}
	if o.TensorParallel < 1 || o.TensorParallel > 8 {
		return o, fmt.Errorf("tensor parallel %d: want 1..8", o.TensorParallel)
	}
	if err := o.DCGM.withDefaults(); err != nil {
		return o, err
	}
	if o.StepInterval == 0 {
		o.StepInterval = 10 * time.Millisecond
	}
	if o.MaxFinished == 0 {
		o.MaxFinished = 20000
	}
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, o.EngineConfig.validate()
}

func (e EngineConfig) withDefaults() EngineConfig {
	d := DefaultEngine
	if e.MaxNumSeqs == 0 {
		e.MaxNumSeqs = d.MaxNumSeqs
	}
	if e.MaxNumBatchedTokens == 0 {
		e.MaxNumBatchedTokens = d.MaxNumBatchedTokens
	}
	if e.MaxModelLen == 0 {
		e.MaxModelLen = d.MaxModelLen
	}
	if e.NumGPUBlocks == 0 {
		e.NumGPUBlocks = d.NumGPUBlocks
	}
	if e.BlockSize == 0 {
		e.BlockSize = d.BlockSize
	}
	return e
}

func (e EngineConfig) validate() error {
	switch {
	case e.MaxNumSeqs < 1, e.MaxNumBatchedTokens < 1, e.BlockSize < 1:
		return errors.New("engine: max-num-seqs, max-num-batched-tokens and block size must be positive")
	case e.MaxModelLen < 16:
		return fmt.Errorf("engine: max-model-len %d is too small", e.MaxModelLen)
	case e.NumGPUBlocks*e.BlockSize < e.MaxModelLen:
		return fmt.Errorf("engine: a KV pool of %d blocks cannot hold one %d-token sequence", e.NumGPUBlocks, e.MaxModelLen)
	}
	return nil
}
