package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vllmsim"
)

func init() {
	register("demo", command{summary: "one command: a simulated vLLM (or SGLang), the daemon, a real alert, the thread as it fills in", run: runDemo})
}

// demoFlags are what `autocapture demo` is told.
type demoFlags struct {
	scenario   string
	engine     string
	dir        string
	prometheus string
	simListen  string
	keep       bool
	warmup     time.Duration
	timeout    time.Duration
}

// demoModel is the model the simulated server serves (label model_name).
const demoModel = "meta-llama/Llama-3.1-8B-Instruct"

// demoEngineName is how the intro names each engine.
var demoEngineName = map[string]string{vllmsim.EngineVLLM: "vLLM", vllmsim.EngineSGLang: "SGLang"}

// runDemo runs one alert through the daemon against an in-process vLLM
// simulator and prints the thread; see README.md, "Try it".
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[--engine E] [--scenario S] [--storage.path D] [--prometheus.url U] [--keep]", stdout, stderr)
	var f demoFlags
	fs.StringVar(&f.scenario, "scenario", vllmsim.ScenarioUnexplained, "the simulated cause: "+strings.Join(demoScenarios(), ", "))
	fs.StringVar(&f.engine, "engine", vllmsim.EngineVLLM, "the simulated server: vllm, or sglang (its /metrics, spans and profiler; the shipped SGLang rules and playbooks)")
	fs.StringVar(&f.dir, "storage.path", "", "folder for the run store, artifacts, profiler files and logs (default: a new temporary folder)")
	fs.StringVar(&f.prometheus, "prometheus.url", "", "Prometheus URL that scrapes the simulator, for the full tier 1 (default: none; triage from the instance's /metrics)")
	fs.StringVar(&f.simListen, "vllm.listen-address", "", "loopback address of the simulated vLLM, for a Prometheus to scrape (default: a free port; the agent takes port 9101 of the same host)")
	fs.BoolVar(&f.keep, "keep", false, "after the run, go on serving the API until interrupted")
	fs.DurationVar(&f.warmup, "warmup", 5*time.Second, "traffic the simulator serves before the alert fires")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "give up when the run has not finished this long after the alert")
	fs.alias("dir", "storage.path")
	fs.alias("prometheus", "prometheus.url")
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if _, ok := demoRules[f.engine]; !ok {
		fmt.Fprintf(stderr, "demo: --engine %q: want vllm or sglang\n", f.engine)
		return 2
	}
	if _, ok := demoRules[f.engine][f.scenario]; !ok {
		fmt.Fprintf(stderr, "demo: --scenario %q: want one of %s (healthy trips no alert)\n", f.scenario, strings.Join(demoScenarios(), ", "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := demo(ctx, f, stdout); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

// demoSetup is everything the demo started, to stop in reverse order.
type demoSetup struct {
	dir, logFile string
	logOut       io.Closer
	log          *zap.Logger
	sim          *demoSim
	daemon       *serving
	thread       *demoThread
	url          string // the daemon's http://127.0.0.1:port
}

// keepHint says, before a demo without --keep exits, that the links it
// printed stop answering then and how to keep them.
const keepHint = "\nThe page and run links above stop answering when the demo exits (now); " +
	"the artifacts stay in the folder. To read the run page, run the demo again with --keep: it goes on serving until Ctrl-C."

// demo starts the simulator, its agent and the daemon, fires the alert, waits
// for the run and prints where everything is.
func demo(ctx context.Context, f demoFlags, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := startDemo(ctx, f, stdout)
	if err != nil {
		return err
	}
	defer s.logOut.Close() // last: the sim and the daemon log until they stop
	defer s.sim.stop()
	served := make(chan error, 1)
	go func() { served <- s.daemon.wait(ctx) }()
	stopDaemon := func() error { cancel(); return <-served }
	runErr := s.fire(ctx, f, stdout)
	if runErr == nil && !f.keep {
		fmt.Fprintln(stdout, keepHint)
	}
	if runErr == nil && f.keep {
		fmt.Fprintf(stdout, "\nServing the API at %s (runs: %s/api/v1/runs, page: %s/runs/%s); Ctrl-C to stop.\n",
			s.url, s.url, s.url, s.thread.runID)
		select {
		case <-ctx.Done():
		case err := <-served:
			return err
		}
	}
	if err := stopDaemon(); err != nil && runErr == nil {
		runErr = fmt.Errorf("daemon: %w", err)
	}
	return runErr
}

// startDemo makes the folder, starts the simulator (with the profile agent
// beside it) and the daemon on embedded defaults. On an error it stops what
// it started.
func startDemo(ctx context.Context, f demoFlags, stdout io.Writer) (_ *demoSetup, err error) {
	dir, err := demoDir(f.dir)
	if err != nil {
		return nil, err
	}
	var undo []func()
	defer func() {
		for i := len(undo) - 1; err != nil && i >= 0; i-- {
			undo[i]()
		}
	}()
	s := &demoSetup{dir: dir, logFile: filepath.Join(dir, "autocapture.log")}
	lf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.logOut, undo = lf, append(undo, func() { lf.Close() })
	if s.log, err = newLogger(config.Log{Level: "info", Format: "console"}, lf); err != nil {
		return nil, err
	}
	token := randomToken()
	if s.sim, err = startDemoSim(ctx, f.engine, f.scenario, f.simListen, filepath.Join(dir, "profiler"), token, s.log); err != nil {
		return nil, err
	}
	undo = append(undo, s.sim.stop)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { ln.Close() })
	s.url = "http://" + ln.Addr().String()
	cfg, err := demoConfig(f, dir, ln.Addr().String(), token)
	if err != nil {
		return nil, err
	}
	s.thread = newDemoThread(stdout, s.url)
	s.printIntro(stdout, f)
	if s.daemon, err = startServing(ctx, cfg, s.log, serveWiring{stdout: stdout, listener: ln, console: s.thread}); err != nil {
		return nil, err
	}
	return s, nil
}

// printIntro says what runs where before anything happens.
func (s *demoSetup) printIntro(stdout io.Writer, f demoFlags) {
	fmt.Fprintf(stdout, "autocapture demo: scenario %s (%s)\n", f.scenario, s.sim.description)
	fmt.Fprintf(stdout, "  %s (simulated): http://%s   profile agent: %s   profiler files: %s\n", demoEngineName[f.engine], s.sim.addr, s.sim.agentURL, s.sim.profDir)
	fmt.Fprintf(stdout, "  daemon: %s   folder: %s   log: %s\n", s.url, s.dir, s.logFile)
	if f.prometheus == "" {
		fmt.Fprintln(stdout, "  no Prometheus: tier 1 from the instance's own /metrics (pass --prometheus.url URL for the full tier 1)")
		return
	}
	fmt.Fprintf(stdout, "  Prometheus: %s (it must scrape %s)\n", f.prometheus, s.sim.addr)
}

// demoConfig is the embedded defaults with the demo's folder, listener,
// Prometheus (none unless given: the default localhost:9090 may be anyone's)
// and the agent's token; artifacts are stored uncompressed so the folder left
// behind opens with any tool.
func demoConfig(f demoFlags, dir, listen, token string) (*config.Config, error) {
	cfg, err := config.Load("")
	if err != nil {
		return nil, err
	}
	cfg.Web.ListenAddress = listen
	cfg.Web.ExternalURL = "http://" + listen
	cfg.Storage.Path = filepath.Join(dir, "data")
	cfg.Storage.Compression = storage.CompressionNone
	cfg.Prometheus.URL = f.prometheus
	cfg.Profiling.AgentToken = config.Secret(token)
	cfg.Runs.ShutdownGrace = 5 * time.Second
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	return cfg, nil
}

// demoDir is the folder given (created if missing) or a new temporary one.
func demoDir(dir string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", "autocapture-demo-")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--storage.path: %w", err)
	}
	return filepath.Abs(dir)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b)
}

// errRunFailed: the run reached an end, but not one with a verdict.
var errRunFailed = errors.New("the run did not complete")
