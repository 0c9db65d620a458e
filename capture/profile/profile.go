package profile

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

// Config is the config of a `profile` step (tier 3): a framed profile
// of one vLLM or SGLang server — start_profile, a short frame (optionally with a
// representative load), stop_profile on every path, then the files that
// appeared collected, stored and read. Safe by construction: the fleet-wide
// lease and budget (Env.Profiles) allow one capture per server at a time.
type Config struct {
	// Target is the one server's base URL, scheme://host:port (templated from
	// the alert; default http://<instance label>). Never a load-balanced
	// Service: start and stop must reach the same process.
	Target string `yaml:"target" json:"target,omitempty" jsonschema_description:"The one server's base URL, scheme://host:port, e.g. http://{{ .Labels.instance }} (the default). A pod or host address, never a load-balanced Service: start and stop must reach the same process."`
	// Engine is the server's engine: vllm (default) or sglang, whose
	// profiler takes a JSON body, needs no arming, names its files per
	// rank and freezes serving while its stop exports (SGLANG.md §5).
	Engine string `yaml:"engine" json:"engine,omitempty" jsonschema:"enum=vllm,enum=sglang" jsonschema_description:"The server's engine: vllm (default; armed with --profiler-config, no body, files in torch_profiler_dir) or sglang (no arming; the step sends output_dir, CPU+GPU activities and a profile_prefix naming this capture, and collects only the per-rank <prefix>-<id>-TP-<r>.trace.json.gz files; its stop exports on the scheduler thread and serving freezes meanwhile)."`
	// OutputDir is, for SGLang, the folder on the server the files go to
	// (output_dir); default collect.dir, else the server's own default.
	OutputDir string `yaml:"output_dir" json:"output_dir,omitempty" jsonschema_description:"sglang only: the folder on the server's disk the traces are written to (sent as output_dir). Default: collect.dir (the same path on both sides of a shared volume), else the server's SGLANG_TORCH_PROFILER_DIR, else /tmp."`
	// NumSteps is, for SGLang, a server-side bound: the recording stops
	// itself after this many forward passes even if this daemon dies.
	NumSteps int `yaml:"num_steps" json:"num_steps,omitempty" jsonschema_description:"sglang only: sent as num_steps, the server stops the recording itself after this many forward passes (a bound that holds even if autocapture dies mid-frame; never reached on an idle server). A stop after that answers 'not in progress', which the step takes as done. 0 (default): not sent."`
	// Duration is the frame's length (default 5 s), capped by the daemon's
	// profiling.max_duration (default 30 s).
	Duration time.Duration `yaml:"duration" json:"duration,omitempty" jsonschema_description:"The frame's length (default 5s), capped by the daemon's profiling.max_duration (default 30s)."`
	// Expect is torch (the default: vLLM writes Chrome traces) or cuda (vLLM
	// only calls cudaProfilerStart/Stop; nsys writes .nsys-rep files).
	Expect string `yaml:"expect" json:"expect,omitempty" jsonschema:"enum=torch,enum=cuda" jsonschema_description:"torch (default): vLLM writes Chrome traces into torch_profiler_dir; cuda: vLLM only calls cudaProfilerStart/Stop under nsys, which writes .nsys-rep files."`
	// Load sends representative requests during the frame, never when
	// requests are already waiting.
	Load *Load `yaml:"load" json:"load,omitempty" jsonschema_description:"Representative requests sent to the target's /v1/completions during the frame; never sent when requests are already waiting."`
	// StopTimeout bounds stop_profile, which blocks while the files are
	// flushed (minutes on a large model); default 10m.
	StopTimeout time.Duration `yaml:"stop_timeout" json:"stop_timeout,omitempty" jsonschema_description:"Bound on stop_profile, which blocks while the trace files are flushed (minutes on a large model); default 10m. A stop past it is reported and the server stays leased."`
	// Collect is where the files appear: a local folder or an agent.
	Collect Collect `yaml:"collect" json:"collect,omitempty" jsonschema_description:"Where the profiler's files appear: dir (a folder this daemon sees) or agent (an autocapture agent beside the server). Empty: the files stay on the server."`
	// Cooldown refuses a new capture of this target within this long of its last start.
	Cooldown time.Duration `yaml:"cooldown" json:"cooldown,omitempty" jsonschema_description:"No new capture of this target within this long of its last one (per target, across replicas)."`
	// Cost bounds what the capture may cost live traffic.
	Cost CostBounds `yaml:"cost" json:"cost,omitzero" jsonschema_description:"What the capture may cost the instance's live traffic. Every capture measures it (TTFT, inter-token latency and tokens/s: before the frame from the run's scrape step, during the frame and the stop from the instance's /metrics) and reports it; these bounds skip a capture before it starts."`
	// Baseline keeps this capture as the baseline later captures of the same
	// model (else target) are compared with (take it when healthy).
	Baseline bool `yaml:"baseline" json:"baseline,omitempty" jsonschema_description:"Keep this capture as the baseline that later captures of the same model (else target) are compared with; take it when the server is healthy."`
}

// Load is the representative load of a frame.
type Load struct {
	Requests     int    `yaml:"requests" json:"requests" jsonschema_description:"How many completions to send during the frame."`
	PromptTokens int    `yaml:"prompt_tokens" json:"prompt_tokens,omitempty" jsonschema_description:"Prompt length in tokens (default 512)."`
	MaxTokens    int    `yaml:"max_tokens" json:"max_tokens,omitempty" jsonschema_description:"Tokens to generate per request (default 64)."`
	Model        string `yaml:"model" json:"model,omitempty" jsonschema_description:"Model name; default the alert's model_name label, else none (the server's only model)."`
}

// Collect says where the profiler's files are read from.
type Collect struct {
	// Dir is a folder this daemon sees (the profiler's torch_profiler_dir).
	Dir string `yaml:"dir" json:"dir,omitempty" jsonschema_description:"A folder this daemon sees: the server's torch_profiler_dir on a shared volume."`
	// Agent is an `autocapture agent` base URL, scheme://host:port
	// (templated; allow-listed; the token is the daemon's profiling.agent_token).
	Agent string `yaml:"agent" json:"agent,omitempty" jsonschema_description:"An autocapture agent beside the server, scheme://host:port (allow-listed; authenticated with the daemon's profiling.agent_token)."`
	// RemoveAfterUpload deletes each file from the source once stored.
	RemoveAfterUpload bool `yaml:"remove_after_upload" json:"remove_after_upload,omitempty" jsonschema_description:"Delete each file from the server's folder once it is stored."`
}

// Profile defaults and bounds.
const (
	ExpectTorch = "torch"
	ExpectCUDA  = "cuda"

	profileDefaultDuration    = 5 * time.Second
	profileDefaultMaxDuration = 30 * time.Second
	profileDefaultStopTimeout = 10 * time.Minute
	profileMaxLoadRequests    = 1000
	profileDefaultPrompt      = 512
	profileDefaultMaxTokens   = 64
	// OptOutLabel's defaults: autocapture_profile="off".
	profileDefaultOptOutLabel = "autocapture_profile"
	profileDefaultOptOutValue = "off"
)

// Profile is the `profile` step kind.
type Profile struct {
	cfg Config
	// tune holds the poll and bound timings; tests shorten them.
	tune profileTuning
}

// profileTuning are the step's clocks: how often the lease is renewed, how
// long it is held, how the collector polls for files to settle.
type profileTuning struct {
	renewEvery time.Duration // lease renewal while recording (~2 s)
	hold       time.Duration // a lease not renewed for this long is the sweeper's
	poll       time.Duration // listing poll while files settle
	settle     time.Duration // longest wait for files after the stop answered
	collect    time.Duration // bound on storing the files (detached from the step)
	health     time.Duration // preflight and /metrics read bound
	leaseWrite time.Duration // bound on one lease write made after the step's context ended
}

var defaultProfileTuning = profileTuning{renewEvery: 2 * time.Second, hold: 15 * time.Second, poll: 500 * time.Millisecond,
	settle: 30 * time.Second, collect: 10 * time.Minute, health: 5 * time.Second, leaseWrite: 10 * time.Second}

var _ vocab.Step = (*Profile)(nil)

// WindDown is how long the step may still run once its context ended: the
// stop (stop_timeout), the files settling and their upload, and the lease
// writes. The executor waits this long before abandoning it.
func (p *Profile) WindDown() time.Duration {
	return p.cfg.StopTimeout + p.tune.settle + p.tune.collect + 2*p.tune.leaseWrite
}

// Kind is the profile step kind; capture's registry takes it.
var Kind = vocab.Kind{
	Name:   "profile",
	Tier:   vocab.TierProfile,
	Doc:    "A framed torch (or cuda) profile of one vLLM or SGLang server under a fleet-wide lease and budget: start, a short frame, stop on every path, then the new files stored and read (top kernels, family shares, GPU idle, against a baseline).",
	Config: func() any { return &Config{} },
	Build:  buildProfile,
}

func buildProfile(c any) (vocab.Step, error) {
	cfg, ok := c.(*Config)
	if !ok {
		return nil, fmt.Errorf("profile: config is %T, want *Config", c)
	}
	out := *cfg
	if out.Duration == 0 {
		out.Duration = profileDefaultDuration
	}
	if out.Expect == "" {
		out.Expect = ExpectTorch
	}
	if out.Engine == "" {
		out.Engine = vocab.EngineVLLM
	}
	if out.StopTimeout == 0 {
		out.StopTimeout = profileDefaultStopTimeout
	}
	switch {
	case out.Target != "" && checkBaseURL(out.Target) != nil:
		return nil, fmt.Errorf("profile: target %q: %w", out.Target, checkBaseURL(out.Target))
	case out.Duration < 0:
		return nil, fmt.Errorf("profile: duration %v must be positive", out.Duration)
	case out.Expect != ExpectTorch && out.Expect != ExpectCUDA:
		return nil, fmt.Errorf("profile: expect %q: want torch or cuda", out.Expect)
	case out.Engine != vocab.EngineVLLM && out.Engine != vocab.EngineSGLang:
		return nil, fmt.Errorf("profile: engine %q: want vllm or sglang", out.Engine)
	case out.Engine != vocab.EngineSGLang && (out.OutputDir != "" || out.NumSteps != 0):
		return nil, fmt.Errorf("profile: output_dir and num_steps are sglang's (vLLM writes into its --profiler-config torch_profiler_dir and stops by max_iterations there)")
	case out.NumSteps < 0:
		return nil, fmt.Errorf("profile: num_steps %d must not be negative", out.NumSteps)
	case out.StopTimeout < 0:
		return nil, fmt.Errorf("profile: stop_timeout %v must be positive", out.StopTimeout)
	case out.Cost.MaxITL < 0 || out.Cost.MaxTTFT < 0 || out.Cost.MaxLastStall < 0:
		return nil, fmt.Errorf("profile: cost: max_itl, max_ttft and max_last_stall must not be negative")
	case out.Cooldown < 0:
		return nil, fmt.Errorf("profile: cooldown %v must not be negative", out.Cooldown)
	case out.Collect.Dir != "" && out.Collect.Agent != "":
		return nil, fmt.Errorf("profile: collect: set dir or agent, not both")
	case out.Collect.Agent != "" && checkBaseURL(out.Collect.Agent) != nil:
		return nil, fmt.Errorf("profile: collect agent %q: %w", out.Collect.Agent, checkBaseURL(out.Collect.Agent))
	case out.Collect.RemoveAfterUpload && out.Collect.Dir == "" && out.Collect.Agent == "":
		return nil, fmt.Errorf("profile: collect: remove_after_upload needs dir or agent")
	}
	if l := out.Load; l != nil {
		ld := *l
		if ld.PromptTokens == 0 {
			ld.PromptTokens = profileDefaultPrompt
		}
		if ld.MaxTokens == 0 {
			ld.MaxTokens = profileDefaultMaxTokens
		}
		if ld.Requests < 1 || ld.Requests > profileMaxLoadRequests || ld.PromptTokens < 1 || ld.MaxTokens < 1 {
			return nil, fmt.Errorf("profile: load: want 1..%d requests and positive prompt_tokens and max_tokens, got %d, %d, %d",
				profileMaxLoadRequests, ld.Requests, ld.PromptTokens, ld.MaxTokens)
		}
		out.Load = &ld
	}
	return &Profile{cfg: out, tune: defaultProfileTuning}, nil
}

// checkBaseURL accepts exactly scheme://host:port (http or https, a numeric
// port, an optional trailing slash): no path, query, fragment or userinfo, so
// a label cannot point start and stop anywhere but one server's root.
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("want scheme://host:port: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want scheme://host:port with scheme http or https")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.Contains(s, "?") || strings.Contains(s, "#"):
		return fmt.Errorf("want scheme://host:port, nothing more (no userinfo, query or fragment)")
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("want scheme://host:port without a path")
	}
	h, p, err := net.SplitHostPort(u.Host)
	if err != nil || h == "" || p == "" {
		return fmt.Errorf("want scheme://host:port with an explicit port")
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			return fmt.Errorf("port %q is not a number", p)
		}
	}
	return nil
}

// baseURL is s without a trailing slash.
func baseURL(s string) string { return strings.TrimRight(s, "/") }

// profilePolicy is the daemon's tier-3 policy with its defaults applied.
func profilePolicy(env *vocab.Env) vocab.Profiling {
	var p vocab.Profiling
	if env != nil {
		p = env.Profiling
	}
	if p.MaxDuration <= 0 {
		p.MaxDuration = profileDefaultMaxDuration
	}
	if p.OptOutLabel == "" {
		p.OptOutLabel, p.OptOutValue = profileDefaultOptOutLabel, profileDefaultOptOutValue
	}
	return p
}

// optedOut says why target or the alert must never be profiled, or "".
func optedOut(pol vocab.Profiling, target string, labels map[string]string) string {
	if v, ok := labels[pol.OptOutLabel]; ok && v == pol.OptOutValue {
		return fmt.Sprintf("the alert carries %s=%q", pol.OptOutLabel, pol.OptOutValue)
	}
	host := target
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		host = u.Host
	}
	for _, t := range pol.OptOutTargets {
		if t == "" {
			continue
		}
		if baseURL(t) == baseURL(target) || t == host {
			return fmt.Sprintf("target %s is in profiling.opt_out.targets", host)
		}
	}
	return ""
}
