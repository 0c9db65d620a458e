package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/agent"
	"github.com/autocapture/autocapture/config"
)

func init() {
	register("agent", command{summary: "the profile sidecar: serve the profiler's folder to the daemon (bearer token)", run: runAgent})
}

// agentShutdownGrace is how long streams in flight may finish after SIGTERM,
// inside Kubernetes' default 30 s termination grace.
const agentShutdownGrace = 25 * time.Second

type agentFlags struct {
	dir, listen, tokenFile string
	log                    config.Log
	stall                  time.Duration
}

// runAgent serves --profiler.dir until SIGTERM or SIGINT. The token comes from a file
// only (a mounted Secret): a missing, unreadable or empty file stops it, so
// it never serves without auth.
func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("agent", "--profiler.dir D --web.token-file F [--web.listen-address :9101]", stdout, stderr)
	var f agentFlags
	fs.StringVar(&f.dir, "profiler.dir", "", "the torch profiler's output folder, shared with vLLM (required, must exist)")
	fs.StringVar(&f.listen, "web.listen-address", ":9101", "address to listen on; let only the daemon reach it (NetworkPolicy)")
	fs.StringVar(&f.tokenFile, "web.token-file", "", "file holding the bearer token the daemon sends (required; a mounted Secret)")
	fs.StringVar(&f.log.Level, "log.level", "info", "debug, info, warn or error")
	fs.StringVar(&f.log.Format, "log.format", "json", "json or console")
	fs.DurationVar(&f.stall, "web.stall-timeout", agent.DefaultStallTimeout, "cut a file stream that makes no progress this long")
	fs.alias("dir", "profiler.dir")
	fs.alias("listen", "web.listen-address")
	fs.alias("token-file", "web.token-file")
	fs.alias("stall-timeout", "web.stall-timeout")
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent: unexpected arguments %q\n", fs.Args())
		return 2
	}
	token, err := checkAgentFlags(f)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
	log, err := newLogger(f.log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
	defer log.Sync() //nolint:errcheck // stderr may not support sync
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveAgent(ctx, f, token, log); err != nil {
		log.Error("Agent stopped on an error.", zap.Error(err))
		return 1
	}
	return 0
}

// checkAgentFlags checks the folder and reads the token; every refusal says
// which flag and what to do.
func checkAgentFlags(f agentFlags) (string, error) {
	if f.dir == "" {
		return "", errors.New("--profiler.dir is required: the folder vLLM's torch profiler writes into")
	}
	st, err := os.Stat(f.dir)
	if err != nil {
		return "", fmt.Errorf("--profiler.dir: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("--profiler.dir %s is not a directory", f.dir)
	}
	if f.tokenFile == "" {
		return "", errors.New("--web.token-file is required: the agent never serves without auth (mount the token Secret as a file)")
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--web.token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--web.token-file %s is empty: refusing to serve without auth", f.tokenFile)
	}
	if f.stall <= 0 {
		return "", errors.New("--web.stall-timeout must be positive")
	}
	return token, nil
}

// serveAgent runs the agent's HTTP server until ctx ends, then lets streams
// in flight finish within agentShutdownGrace.
func serveAgent(ctx context.Context, f agentFlags, token string, log *zap.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("autocapture")) // autocapture_build_info
	h, err := agent.NewServerWith(agent.ServerOptions{Dir: agent.Dir{Path: f.dir}, Token: token,
		Log: log.Named("http"), Registry: reg, StallTimeout: f.stall})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	// No ReadTimeout or WriteTimeout: requests have no body, and a stream of
	// hundreds of MB is bounded by the handler's stall deadline instead of a
	// total time. (A ReadTimeout would also cancel a long stream's context.)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 16 << 10, ErrorLog: zap.NewStdLog(log.Named("http"))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("Agent listening.", zap.String("address", ln.Addr().String()), zap.String("dir", f.dir),
		zap.Duration("stall_timeout", f.stall))
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("Shutting down: streams in flight get the grace.", zap.Duration("grace", agentShutdownGrace))
	case serveErr = <-served:
		serveErr = fmt.Errorf("http server: %w", serveErr)
	}
	// Outlives the cancelled signal context on purpose.
	sctx, cancel := context.WithTimeout(context.Background(), agentShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("http shutdown: %w", err))
	}
	log.Info("Stopped.")
	return serveErr
}
