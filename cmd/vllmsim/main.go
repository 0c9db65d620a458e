// Command vllmsim serves a simulated vLLM server: vLLM's /metrics,
// llm_request spans over OTLP, profiler endpoints and OpenAI routes, with
// symptoms produced by an engine model under an injected scenario; with
// --engine=sglang, SGLang's /metrics and spans instead. See
// vllmsim/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/autocapture/autocapture/vllmsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "vllmsim:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	listen string
	opts   vllmsim.Options
	fleet  fleetFlags
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	o := &c.opts
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "web.listen-address", "127.0.0.1:8000", "address to serve vLLM's routes on (vLLM's port is 8000)")
	fs.StringVar(&o.Model, "model", "meta-llama/Llama-3.1-8B-Instruct", "served model name (label model_name)")
	fs.StringVar(&o.Scenario, "scenario", vllmsim.ScenarioHealthy, "injected cause: "+strings.Join(vllmsim.Scenarios(), ", "))
	fs.DurationVar(&o.ShiftAfter, "shift-after", 0, "start with healthy traffic and shift to --scenario after this long (0: the scenario from the start)")
	fs.Float64Var(&o.Load, "load", 0, "open-loop requests per second of the built-in load generator (0: the scenario's, -1: none)")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "closed-loop clients of the load generator (0: the scenario's)")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed: the same seed gives the same run")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP traces endpoint (host:port or URL); empty: no export")
	fs.StringVar(&o.OTLPProtocol, "otlp-protocol", envOr("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"), "grpc or http/protobuf")
	fs.StringVar(&o.ServiceName, "service-name", envOr("OTEL_SERVICE_NAME", "vllm-server"), "service.name of the spans (ignored with --engine sglang, which hard-codes sglang as SGLang does)")
	o.ResourceAttributes = resourceAttributes(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"))
	fs.StringVar(&o.Engine, "engine", vllmsim.EngineVLLM, "serving engine whose surface the sim shows (/metrics, spans, /version): vllm or sglang; the engine model and scenarios are the same")
	fs.StringVar(&o.SGLangEra, "sglang-era", "", "SGLang metric generation with --engine=sglang: "+strings.Join(vllmsim.SGLangEras(), ", ")+" (default 2026; the older eras export no spans)")
	fs.BoolVar(&o.LegacyMetrics, "legacy-metrics", false, "expose the pre-2026 metric names (gpu_cache_usage_perc, time_per_output_token_seconds, gpu_prefix_cache_*)")
	fs.StringVar(&o.Version, "vllm-version", "", "version /version reports (default by metric generation)")
	fs.StringVar(&o.ProfilerDir, "profiler-dir", "", "arm the profiler, writing traces into this directory (unset: /start_profile answers 404)")
	fs.DurationVar(&o.ProfilerFlushDelay, "profiler-flush-delay", 2*time.Second, "how long /stop_profile blocks before the files are written")
	fs.DurationVar(&o.ProfilerMaxRecording, "profiler-max-recording", time.Minute, "recordings longer than this count as a protocol violation")
	fs.IntVar(&o.TensorParallel, "tensor-parallel-size", 1, "worker ranks, one trace file each")
	fs.IntVar(&o.ProfilerLayers, "profiler-layers", 32, "decoder layers a rank's trace shows per iteration (fewer: smaller files, same GPU-time mix)")
	fs.BoolVar(&o.EnforceEager, "enforce-eager", false, "no CUDA graphs: decode steps launch every kernel instead of one cudaGraphLaunch")
	fs.StringVar(&o.ProfilerGPU, "profiler-gpu", "a10g", "GPU the rank traces show: a10g (Ampere names) or b200 (Blackwell: nvjet, trtllm-gen bmm, fmhaSm100)")
	fs.DurationVar(&o.ProfilerFaults.StopHang, "profiler-stop-hang", 0, "fault: /stop_profile blocks this much longer before flushing")
	fs.StringVar(&o.ProfilerFaults.StartWhileFlushing, "profiler-start-while-flushing", "wait", "a start during a flush: wait (takes effect after it) or ignore (fault: dropped)")
	fs.DurationVar(&o.ProfilerFaults.LateFiles, "profiler-late-files", 0, "fault: trace files are written this long after /stop_profile returns")
	fs.IntVar(&o.EngineConfig.MaxNumSeqs, "max-num-seqs", 0, "running slots (0: the default, 32; scenarios may override)")
	fs.IntVar(&o.EngineConfig.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "tokens per step (0: the default, 512)")
	fs.IntVar(&o.EngineConfig.MaxModelLen, "max-model-len", 0, "longest sequence (0: the default, 8192)")
	fs.IntVar(&o.EngineConfig.NumGPUBlocks, "num-gpu-blocks", 0, "KV pool size in 16-token blocks (0: the default, 8192)")
	fs.DurationVar(&o.StepInterval, "step-interval", 10*time.Millisecond, "how often the engine advances in real time")
	c.fleet.register(fs, o)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return c, c.fleet.check()
}

// resourceAttributes reads OTEL_RESOURCE_ATTRIBUTES (k=v,k=v, values
// percent-encoded), as the OpenTelemetry SDKs vLLM uses do.
func resourceAttributes(env string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(env, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			continue
		}
		if dec, err := url.QueryUnescape(v); err == nil {
			v = dec
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// run serves until ctx ends. ready, when set, receives the addresses served.
func run(ctx context.Context, args []string, out io.Writer, ready chan<- served) error {
	c, err := parseFlags(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(out), zap.InfoLevel))
	defer func() { _ = logger.Sync() }()
	c.opts.Logger = logger
	return serve(ctx, c, logger, ready)
}

// served is what run serves once it is ready: the vLLM addresses (one per
// instance) and the DCGM ones (none without --dcgm-listen).
type served struct {
	VLLM, DCGM []string
}
