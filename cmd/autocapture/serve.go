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
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/notify"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner"
	"github.com/autocapture/autocapture/runner/artifacts"
	"github.com/autocapture/autocapture/runner/lifecycle"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/targets"
	"github.com/autocapture/autocapture/vocab"
)

func init() {
	register("serve", command{summary: "run the daemon: Alertmanager webhook, runs API, captures", run: runServe})
}

// serveFlags are serve's Prometheus-style flags; empty means "as in the config".
type serveFlags struct {
	configFile    string
	listenAddress string
	storagePath   string
	logLevel      string
	logFormat     string
}

// runServe runs the daemon until SIGTERM or SIGINT; SIGHUP reloads the playbooks.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "[--config.file F] [--web.listen-address A] [--storage.path D] [--log.level L] [--log.format F]", stdout, stderr)
	var f serveFlags
	fs.StringVar(&f.configFile, "config.file", "", "daemon config file (default: embedded defaults)")
	fs.StringVar(&f.listenAddress, "web.listen-address", "", "address to listen on (overrides web.listen_address; default 127.0.0.1:9095)")
	fs.StringVar(&f.storagePath, "storage.path", "", "folder of the SQLite run store and local artifacts (overrides storage.path; default ./data)")
	fs.StringVar(&f.logLevel, "log.level", "", "debug, info, warn or error (overrides log.level; default info)")
	fs.StringVar(&f.logFormat, "log.format", "", "json or console (overrides log.format; default console, the image's config json)")
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg, err := serveConfig(f)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	defer log.Sync() //nolint:errcheck // stderr may not support sync
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, log, stdout); err != nil {
		log.Error("Daemon stopped on an error.", zap.Error(err))
		return 1
	}
	return 0
}

// serveConfig loads the config file (or the defaults), applies the flags and
// validates the result again: a flag can move the listener off loopback.
func serveConfig(f serveFlags) (*config.Config, error) {
	cfg, err := config.Load(f.configFile)
	if err != nil {
		return nil, err
	}
	if f.listenAddress == "" && f.storagePath == "" && f.logLevel == "" && f.logFormat == "" {
		return cfg, nil
	}
	if f.listenAddress != "" {
		cfg.Web.ListenAddress = f.listenAddress
	}
	if f.storagePath != "" {
		cfg.Storage.Path = f.storagePath
	}
	if f.logLevel != "" {
		cfg.Log.Level = f.logLevel
	}
	if f.logFormat != "" {
		cfg.Log.Format = f.logFormat
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("with the command-line flags applied: %w", err)
	}
	return cfg, nil
}

// newLogger builds the daemon's one logger from config.Log, writing to w.
func newLogger(c config.Log, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if c.Format == "console" {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)), nil
}

// serve wires the daemon and runs it until ctx ends, then shuts down in order:
// the HTTP server first (no new alerts), then the runner within shutdown_grace.
func serve(ctx context.Context, cfg *config.Config, log *zap.Logger, stdout io.Writer) error {
	d, err := startServing(ctx, cfg, log, serveWiring{stdout: stdout})
	if err != nil {
		return err
	}
	return d.wait(ctx)
}

// serveWiring is what a caller of startServing may give beyond the config:
// `serve` gives only stdout; `demo` gives its listener and its thread printer.
type serveWiring struct {
	stdout io.Writer
	// listener, when set, is served instead of listening on web.listen_address
	// (which must then name the listener's address).
	listener net.Listener
	// console, when set, replaces the console notifier (notify.console.enabled).
	console notify.Notifier
	// registerer, when set, wraps the registry the daemon's parts register
	// on: the metrics reference's test lists what they register.
	registerer func(prometheus.Registerer) prometheus.Registerer
}

// serving is a started daemon: its runner working and its HTTP server up.
type serving struct {
	cfg    *config.Config
	log    *zap.Logger
	svc    *runner.Service
	srv    *http.Server
	addr   string
	served chan error
}

// startServing wires the daemon and starts it: the runner, the HTTP server
// and the playbook reloads (on SIGHUP and file changes) until ctx ends.
func startServing(ctx context.Context, cfg *config.Config, log *zap.Logger, w serveWiring) (*serving, error) {
	registry := prometheus.NewRegistry()
	var reg prometheus.Registerer = registry
	if w.registerer != nil {
		reg = w.registerer(registry)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("autocapture")) // autocapture_build_info
	planner, reload, err := newPlanner(ctx, cfg, log, reg)
	if err != nil {
		return nil, fmt.Errorf("playbooks: %w", err)
	}
	env, spool, err := newEnv(ctx, cfg, log, reg)
	if err != nil {
		return nil, err
	}
	pages := &pageLinks{}
	notifiers, err := newNotifiers(cfg, env, log, w.stdout, pages)
	if err != nil {
		return nil, err
	}
	if w.console != nil {
		notifiers["console"] = w.console
	}
	acts, err := actionsOptions(cfg)
	if err != nil {
		return nil, err
	}
	svc, err := runner.Open(ctx, runner.Options{
		Config:       cfg.Runs,
		Retention:    cfg.Retention,
		Profiling:    cfg.Profiling,
		DatabaseURL:  cfg.Database.URL.Reveal(),
		DatabaseWait: cfg.Database.StartupWait,
		SQLitePath:   filepath.Join(cfg.Storage.Path, "autocapture.db"),
		Planner:      planner,
		Notifiers:    notifiers,
		Storm:        cfg.Notify.Storm,
		ChannelLabel: cfg.Notify.Slack.ChannelLabel,
		Env:          env,
		Spool:        spool,
		Log:          log,
		Registerer:   reg,
		Links:        threadLinks(cfg, env, log),
		Actions:      acts,
	})
	if err != nil {
		return nil, fmt.Errorf("run store: %w", err)
	}
	env.Profiles = svc.Profiling() // the fleet-wide lease and budget over framed profiles
	pages.set(svc.Signer())        // before svc.Start: no thread is delivered before
	h, err := handlers.New(handlers.Options{Runs: svc, Profiling: svc.Profiling(), Auth: cfg.Web.Auth, ClientCertAuth: cfg.Web.ClientCertAuth(), MaxBodyBytes: cfg.Web.MaxBodyBytes,
		Reload: reload, Registry: registry, Registerer: reg, Log: log.Named("http"), SlackSigningSecret: interactions(cfg.Notify.Slack), Feedback: svc,
		SlackActions: slackActions(cfg, acts, svc), Artifacts: artifactRoute(cfg, env, svc), PageLinks: svc.Signer()})
	if err != nil {
		svc.Close()
		return nil, err
	}
	ln := w.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Web.ListenAddress); err != nil {
			svc.Close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.Web.ListenAddress, err)
		}
	}
	tln, reloadTLS, err := listenTLS(ctx, cfg.Web.TLS, ln, log)
	if err != nil {
		ln.Close()
		svc.Close()
		return nil, err
	}
	ln = tln
	if err := svc.Start(ctx); err != nil {
		ln.Close()
		svc.Close()
		return nil, err
	}
	d := &serving{cfg: cfg, log: log, svc: svc, addr: ln.Addr().String(), served: make(chan error, 1),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: zap.NewStdLog(log.Named("http"))}}
	go func() { d.served <- d.srv.Serve(ln) }()
	go reloadOnHUP(ctx, reload, reloadTLS, log)
	log.Info("Listening.", zap.String("address", d.addr), zap.String("storage", cfg.Storage.Path),
		zap.Bool("auth", cfg.Web.Auth.Enabled()), zap.Bool("tls", cfg.Web.TLS.Enabled()), zap.Bool("postgres", cfg.Database.URL != ""))
	return d, nil
}

// wait serves until ctx ends (or the HTTP server fails), then shuts down.
func (d *serving) wait(ctx context.Context) error {
	defer d.svc.Close()
	var serveErr error
	select {
	case <-ctx.Done():
		d.log.Info("Shutting down: no new webhooks; running steps get the shutdown grace.", zap.Duration("grace", d.cfg.Runs.ShutdownGrace))
	case serveErr = <-d.served:
		serveErr = fmt.Errorf("http server: %w", serveErr)
	}
	return errors.Join(serveErr, shutdown(d.srv, d.svc, d.cfg.Runs.ShutdownGrace, d.log))
}

// shutdown stops the HTTP server, then the runner, each under its own bound.
// It must outlive the cancelled signal context, hence context.Background.
func shutdown(srv *http.Server, svc *runner.Service, grace time.Duration, log *zap.Logger) error {
	hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(hctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	// Stop interrupts what is left after grace itself; the margin lets it release leases.
	rctx, cancel2 := context.WithTimeout(context.Background(), grace+10*time.Second)
	defer cancel2()
	if err := svc.Stop(rctx); err != nil {
		errs = append(errs, fmt.Errorf("runner stop: %w", err))
	}
	log.Info("Stopped.")
	return errors.Join(errs...)
}

// newPlanner is the seam between the daemon and the playbooks: it loads the
// configured playbooks (the shipped vLLM ones when none are configured) and
// returns the planner the runner uses and the reload function behind /-/reload
// and SIGHUP, and watches the playbook folders so an edit reloads by itself (a
// broken edit keeps the last good set). A file error here stops the daemon with
// file:line:col.
func newPlanner(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (lifecycle.Planner, func() error, error) {
	r, err := playbooks.NewReloader(playbooks.Sources{Globs: cfg.Playbooks, Shipped: cfg.ShippedPlaybooks}, log.Named("playbooks"), reg)
	if err != nil {
		return nil, nil, err
	}
	go func() {
		if err := r.Watch(ctx); err != nil {
			log.Warn("Cannot watch the playbook files; SIGHUP and /-/reload still reload them.", zap.Error(err))
		}
	}()
	return r, r.Reload, nil
}

// reloadOnHUP reloads the playbooks and the TLS files on each SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, reload, reloadTLS func() error, log *zap.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading the playbooks and the TLS files.")
			_ = reload()    // the reloader logs a failure (file:line:col) and keeps the last good set
			_ = reloadTLS() // likewise: a bad pair is logged, the served one stays
		}
	}
}

// newEnv builds what steps may reach: the artifact store, the allow-listed
// client for targets from alert labels, and the configured backends. An S3
// store is checked in the background until ctx ends (see newStore); its
// spool (nil for the local backend) is returned for the runner's late uploads.
func newEnv(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (*vocab.Env, artifacts.Spool, error) {
	store, spool, err := newStore(ctx, cfg.Storage, log.Named("storage"), reg)
	if err != nil {
		return nil, nil, fmt.Errorf("storage: %w", err)
	}
	policy, err := targets.New(cfg.Targets, targets.Options{Log: log.Named("targets"), PrometheusURL: cfg.Prometheus.URL,
		DaemonAddress: cfg.Web.ListenAddress}) // labels must not point steps at our own API
	if err != nil {
		return nil, nil, err
	}
	env := &vocab.Env{Store: store, Targets: policy.Client(0), Profiling: profilingPolicy(cfg.Profiling)}
	if cfg.Prometheus.URL != "" {
		env.Prometheus = &vocab.Endpoint{URL: cfg.Prometheus.URL, Client: &http.Client{}, Timeout: cfg.Prometheus.Timeout,
			Default: cfg.Prometheus.URL == config.Default().Prometheus.URL} // nothing there: not set up, not failed
	}
	if cfg.Traces.URL != "" {
		env.Traces = &vocab.TracesEndpoint{Backend: cfg.Traces.Backend, Service: cfg.Traces.Service,
			// traces.timeout bounds each search the step makes (it may make many).
			Endpoint: vocab.Endpoint{URL: cfg.Traces.URL, Client: &http.Client{Timeout: cfg.Traces.Timeout}, Timeout: cfg.Traces.Timeout}}
	}
	if spool == nil { // a nil *storage.Spool must not become a non-nil interface
		return env, nil, nil
	}
	return env, spool, nil
}

// profilingPolicy is tier 3's policy as the profile step reads it.
func profilingPolicy(p config.Profiling) vocab.Profiling {
	name, value := p.OptOutLabel()
	return vocab.Profiling{MaxDuration: p.MaxDuration, OptOutTargets: p.OptOut.Targets,
		OptOutLabel: name, OptOutValue: value, AgentToken: p.AgentToken.Reveal()}
}

// newStore builds the artifact store storage.backend names. An S3 bucket is
// checked at once and every minute by a goroutine that ends with ctx; its
// state is autocapture_storage_up{backend="s3"} and a log line per change. A
// failing check does not stop the daemon, nor make /-/ready fail: runs still
// start and record their uploads' errors, and the store is used as soon as it
// answers. Uploads are counted (autocapture_storage_uploaded_*_total,
// autocapture_storage_upload_failures_total{reason}). With S3, an artifact
// put while the bucket is unavailable is kept in the spool folder
// storage.path/spool (autocapture_spool_* gauges) and uploaded later by this
// replica (runs.replica; see runner/artifacts/upload.go): the folder must survive a
// restart (a persistent volume).
func newStore(ctx context.Context, c config.Storage, log *zap.Logger, reg prometheus.Registerer) (vocab.Store, *storage.Spool, error) {
	m, err := storage.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	if c.Backend != config.BackendS3 {
		l, err := storage.NewLocal(filepath.Join(c.Path, "artifacts"), storage.WithLocalCompression(c.Compression))
		if err != nil {
			return nil, nil, err
		}
		return m.Instrument(l, config.BackendLocal), nil, nil
	}
	s3, err := storage.NewS3(ctx, c.S3.Options(c.Compression))
	if err != nil {
		return nil, nil, err
	}
	spool, err := storage.NewSpool(m.Instrument(s3, config.BackendS3), filepath.Join(c.Path, "spool"), c.Compression)
	if err != nil {
		return nil, nil, err
	}
	if err := storage.RegisterSpool(reg, spool); err != nil {
		return nil, nil, err
	}
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "autocapture_storage_up",
		Help: "Whether the artifact store answered its last check (1) or not (0); checked every minute."}, []string{"backend"})
	reg.MustRegister(up)
	o := s3.Options()
	log = log.With(zap.String("backend", config.BackendS3), zap.String("bucket", o.Bucket), zap.String("endpoint", o.Endpoint))
	ck := &storage.Checker{Check: s3.Check, Interval: time.Minute, Changed: func(err error) {
		if err != nil {
			up.WithLabelValues(config.BackendS3).Set(0)
			log.Error("The artifact bucket cannot be used; runs still start, but their artifacts cannot be stored until it can (checked every minute).", zap.Error(err))
			return
		}
		up.WithLabelValues(config.BackendS3).Set(1)
		log.Info("The artifact bucket can be used.")
	}}
	go ck.Run(ctx)
	return spool, spool, nil
}

// newNotifiers returns where threads go, by the name each thread operation is
// delivered under: the console, Slack, or both.
func newNotifiers(cfg *config.Config, env *vocab.Env, log *zap.Logger, stdout io.Writer, pages slacknotify.PageSigner) (map[string]notify.Notifier, error) {
	out := map[string]notify.Notifier{}
	if cfg.Notify.Console.Enabled {
		out["console"] = notify.NewConsole(stdout)
	}
	if cfg.Notify.Slack.Enabled {
		var store slacknotify.ArtifactReader
		if env != nil && env.Store != nil {
			store = env.Store
		}
		n, err := slacknotify.New(cfg.Notify.Slack, store, log.Named("slack"), slacknotify.WithExternalURL(cfg.Web.ExternalURL),
			slacknotify.WithRunPageLinks(pages, cfg.Web.LinkTTL))
		if err != nil {
			return nil, fmt.Errorf("notify.slack: %w", err)
		}
		out["slack"] = n
	}
	return out, nil
}

// interactions is the signing secret of Slack's buttons, empty (no route)
// unless Slack posts threads with buttons.
func interactions(c config.Slack) config.Secret {
	if !c.Interactive() {
		return ""
	}
	return c.SigningSecret
}
