package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/vllmsim"
)

// fleetFlags are the fleet and DCGM flags: N instances of one model on N
// addresses, each with its scenario, share and GPU faults, and a DCGM
// exporter surface per instance.
type fleetFlags struct {
	listen, dcgmListen []string
	scenario           map[int]string
	share              map[int]float64
	gpu                map[int][]vllmsim.GPUFault
	dcgmClockEvents    bool
	dcgmPodMapping     bool
}

func (f *fleetFlags) register(fs *flag.FlagSet, o *vllmsim.Options) {
	f.scenario, f.share, f.gpu = map[int]string{}, map[int]float64{}, map[int][]vllmsim.GPUFault{}
	fs.Func("fleet-listen", "serve a fleet: one instance per address, comma-separated (instance i on the i-th); replaces --web.listen-address",
		func(v string) error { f.listen = splitList(v); return nil })
	fs.Func("dcgm-listen", "serve a DCGM exporter /metrics per instance: one address (single mode) or one per --fleet-listen address, comma-separated",
		func(v string) error { f.dcgmListen = splitList(v); return nil })
	fs.Func("instance-scenario", "I=scenario: instance I's scenario (0-based; repeatable; default --scenario)", func(v string) error {
		i, val, err := indexed(v)
		if err == nil {
			_, err = vllmsim.LookupScenario(val)
		}
		f.scenario[i] = val
		return err
	})
	fs.Func("instance-share", "I=W: instance I's built-in load is the scenario's × W (repeatable; default 1)", func(v string) error {
		i, val, err := indexed(v)
		if err != nil {
			return err
		}
		w, err := strconv.ParseFloat(val, 64)
		if err != nil || w <= 0 {
			return fmt.Errorf("share %q: want a number > 0", val)
		}
		f.share[i] = w
		return nil
	})
	fs.Func("instance-gpu", "I=throttle:<reason>[@delay], I=xid:<code>[@delay] or I=row_remap:<rows>|failed[@delay]: a GPU fault on instance I's GPU 0 (repeatable); reasons: "+
		strings.Join(vllmsim.ThrottleReasons(), ", "), func(v string) error {
		i, val, err := indexed(v)
		if err != nil {
			return err
		}
		g, err := vllmsim.ParseGPUFault(val)
		f.gpu[i] = append(f.gpu[i], g)
		return err
	})
	fs.StringVar(&o.DCGM.Names, "dcgm-names", vllmsim.DCGMNamesClassic, "DCGM metric generation: classic (DCGM_FI_DEV_SM_CLOCK, MHz, mJ, %, MiB) or 4.9 (DCGM 4.7 names: _SM_CLOCK_HERTZ, J, ratios, bytes)")
	fs.BoolVar(&f.dcgmClockEvents, "dcgm-clock-events", true, "include DCGM_FI_DEV_CLOCKS_EVENT_REASONS (not in the exporter's default CSV)")
	fs.BoolVar(&f.dcgmPodMapping, "dcgm-pod-mapping", false, "add the exporter's pod-mapping labels: container=vllm, namespace=default, pod=vllm-<I>")
	fs.Func("dcgm-sentinel", "report FIELD (a DCGM_FI_ name) as the not-supported sentinel "+vllmsim.DCGMSentinel+" (repeatable; a test of readers)",
		func(v string) error { o.DCGM.Sentinels = append(o.DCGM.Sentinels, v); return nil })
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// indexed reads "I=value".
func indexed(v string) (int, string, error) {
	k, val, ok := strings.Cut(v, "=")
	i, err := strconv.Atoi(k)
	if !ok || err != nil || i < 0 {
		return 0, "", fmt.Errorf("%q: want I=value with I an instance index (0-based)", v)
	}
	return i, val, nil
}

// check refuses what cannot be served: per-instance flags naming an
// instance that does not exist, a DCGM list not parallel to the fleet's.
func (f *fleetFlags) check() error {
	n := max(len(f.listen), 1)
	if len(f.listen) > 0 && len(f.dcgmListen) > 0 && len(f.dcgmListen) != len(f.listen) {
		return fmt.Errorf("--dcgm-listen has %d addresses, --fleet-listen %d: want one per instance", len(f.dcgmListen), len(f.listen))
	}
	if len(f.listen) == 0 && len(f.dcgmListen) > 1 {
		return errors.New("--dcgm-listen: one address without --fleet-listen")
	}
	for _, m := range []map[int]bool{keys(f.scenario), keys(f.share), keys(f.gpu)} {
		for i := range m {
			if i >= n {
				return fmt.Errorf("instance %d: there are %d (--fleet-listen)", i, n)
			}
		}
	}
	return nil
}

func keys[V any](m map[int]V) map[int]bool {
	out := map[int]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// serve runs the fleet (one instance without --fleet-listen) until ctx ends.
func serve(ctx context.Context, c config, logger *zap.Logger, ready chan<- served) error {
	f := c.fleet
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}
	// listen opens every address of list, in order, into lns.
	listen := func(list []string) ([]string, error) {
		var out []string
		for _, addr := range list {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return nil, err
			}
			lns = append(lns, ln)
			out = append(out, ln.Addr().String())
		}
		return out, nil
	}
	var addrs served
	var err error
	vllm := f.listen
	if len(vllm) == 0 { // single mode
		vllm = []string{c.listen}
	}
	if addrs.VLLM, err = listen(vllm); err == nil {
		addrs.DCGM, err = listen(f.dcgmListen)
	}
	if err != nil {
		closeAll()
		return err
	}
	base := c.opts
	base.DCGM.NoClockEvents = !f.dcgmClockEvents
	if f.dcgmPodMapping {
		base.DCGM.PodMapping = &vllmsim.DCGMPod{Namespace: "default", Pod: "vllm", Container: "vllm"}
	}
	fleet, err := newFleet(c, base, addrs.VLLM)
	if err != nil {
		closeAll()
		return err
	}
	// Each instance's vLLM server, then its DCGM one; lns holds the vLLM
	// listeners, then the DCGM ones.
	var srvs []*http.Server
	serveErr := make(chan error, len(lns))
	start := func(ln net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, srv)
		go func() { serveErr <- srv.Serve(ln) }()
	}
	for i, in := range fleet.Instances {
		start(lns[i], in.Handler())
		if i < len(addrs.DCGM) {
			start(lns[len(addrs.VLLM)+i], in.DCGMHandler())
		}
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runErr := make(chan error, 1)
	go func() { runErr <- fleet.Run(runCtx) }()
	for i, in := range fleet.Instances {
		fields := []zap.Field{zap.Int("instance", i), zap.String("address", addrs.VLLM[i]),
			zap.String("scenario", in.State().Scenario), zap.String("model", c.opts.Model), zap.Duration("shift_after", c.opts.ShiftAfter)}
		if i < len(addrs.DCGM) {
			fields = append(fields, zap.String("dcgm_address", addrs.DCGM[i]))
		}
		logger.Info("Serving a simulated vLLM.", fields...)
	}
	if ready != nil {
		ready <- addrs
	}

	select {
	case err = <-serveErr:
	case <-ctx.Done():
	}
	stopRun()
	// Shutting down must outlive ctx, which has just ended.
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var shutErrs []error
	for _, srv := range srvs {
		shutErrs = append(shutErrs, srv.Shutdown(shutCtx))
	}
	// Spans that could not be delivered are the collector's problem, not a
	// failed run: say so and go on.
	if spanErr := errors.Join(<-runErr, fleet.Close(shutCtx)); spanErr != nil {
		logger.Warn("Some spans were not exported.", zap.Error(spanErr))
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	logger.Info("Stopped.")
	return errors.Join(append(shutErrs, err)...)
}

// newFleet builds the instances. Without --fleet-listen it is one Sim built
// exactly as before the fleet existed (same seed, resource attributes from
// OTEL_RESOURCE_ATTRIBUTES only, profiler files straight in --profiler-dir).
func newFleet(c config, base vllmsim.Options, addrs []string) (*vllmsim.Fleet, error) {
	f := c.fleet
	if len(f.listen) == 0 {
		o := base
		if sc := f.scenario[0]; sc != "" {
			o.Scenario = sc
		}
		o.LoadScale, o.GPUFaults = f.share[0], f.gpu[0]
		if p := o.DCGM.PodMapping; p != nil {
			o.DCGM.PodMapping = &vllmsim.DCGMPod{Namespace: p.Namespace, Container: p.Container, Pod: p.Pod + "-0"}
		}
		s, err := vllmsim.New(o)
		if err != nil {
			return nil, err
		}
		return &vllmsim.Fleet{Instances: []*vllmsim.Instance{{Sim: s, Addr: addrs[0]}}}, nil
	}
	fo := vllmsim.FleetOptions{Base: base}
	for i, a := range addrs {
		fo.Instances = append(fo.Instances, vllmsim.InstanceOptions{Addr: a, Scenario: f.scenario[i], Share: f.share[i], GPUFaults: f.gpu[i]})
	}
	return vllmsim.NewFleet(fo)
}
