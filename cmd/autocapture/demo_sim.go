package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/agent"
	"github.com/autocapture/autocapture/vllmsim"
)

// demoAgentPort is where the shipped vllm-profile preset collects from: the
// autocapture agent on the alert instance's host, port 9101.
const demoAgentPort = 9101

// demoHistory is how much simulated traffic the sim has served when it
// starts (its clock starts this far back and catches up at once), so the
// queue, the batch and the KV pool are already in the scenario's state.
const demoHistory = 30 * time.Second

// demoSim is the in-process vLLM simulator with its profiler armed and an
// in-process autocapture agent serving the profiler's folder on the same
// loopback host, port 9101: the shipped profile preset works unchanged.
type demoSim struct {
	sim         *vllmsim.Sim
	addr        string // host:port, the alert's instance
	agentURL    string
	profDir     string
	description string
	started     time.Time

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	servers  []*http.Server
}

// startDemoSim starts the simulator of engine on scenario and its agent (token) until
// stop or ctx ends. listen is the simulator's address; "" picks a free port
// on the loopback host whose port 9101 is free.
func startDemoSim(ctx context.Context, engine, scenario, listen, profDir, token string, log *zap.Logger) (*demoSim, error) {
	if err := os.MkdirAll(profDir, 0o755); err != nil {
		return nil, err
	}
	sc, err := vllmsim.LookupScenario(scenario)
	if err != nil {
		return nil, err
	}
	simLn, agentLn, err := listenSim(listen)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	sim, err := vllmsim.New(vllmsim.Options{Engine: engine, Scenario: scenario, Model: demoModel, Seed: 1, ProfilerDir: profDir,
		Start: now.Add(-demoHistory), Logger: log.Named("vllmsim")})
	if err != nil {
		agentLn.Close()
		simLn.Close()
		return nil, err
	}
	ag, err := agent.NewServerWith(agent.ServerOptions{Dir: agent.Dir{Path: profDir}, Token: token, Log: log.Named("agent")})
	if err != nil {
		agentLn.Close()
		simLn.Close()
		return nil, err
	}
	d := &demoSim{sim: sim, addr: simLn.Addr().String(), agentURL: "http://" + agentLn.Addr().String(),
		profDir: profDir, description: sc.Description, started: now}
	runCtx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	d.serve(simLn, sim.Handler())
	d.serve(agentLn, ag)
	d.wg.Go(func() { _ = sim.Run(runCtx) })
	return d, nil
}

func (d *demoSim) serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.servers = append(d.servers, srv)
	d.wg.Go(func() { _ = srv.Serve(ln) })
}

// stop ends the load, the simulator's and the agent's servers.
func (d *demoSim) stop() {
	d.stopOnce.Do(func() {
		d.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range d.servers {
			_ = s.Shutdown(ctx)
		}
		d.wg.Wait()
		_ = d.sim.Close(ctx)
	})
}

// listenSim listens for the simulator on listen and for its agent on the
// same host, port 9101; with listen "", on a free port of the host
// listenAgentPort finds.
func listenSim(listen string) (sim, agent net.Listener, err error) {
	if listen == "" {
		if agent, err = listenAgentPort(); err != nil {
			return nil, nil, err
		}
		host, _, _ := net.SplitHostPort(agent.Addr().String())
		if sim, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			agent.Close()
			return nil, nil, err
		}
		return sim, agent, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--vllm.listen-address: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, nil, fmt.Errorf("--vllm.listen-address %s: the demo serves on loopback only", listen)
	}
	if sim, err = net.Listen("tcp", listen); err != nil {
		return nil, nil, fmt.Errorf("--vllm.listen-address: %w", err)
	}
	if agent, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(demoAgentPort))); err != nil {
		sim.Close()
		return nil, nil, fmt.Errorf("the profile agent needs %s:%d (the shipped preset collects from the instance's host:%d): %w",
			host, demoAgentPort, demoAgentPort, err)
	}
	return sim, agent, nil
}

// listenAgentPort listens on port 9101 of 127.0.0.1, or else of the first
// free 127.0.0.x (Linux routes all of 127.0.0.0/8 to loopback), so a demo
// runs beside another demo or a real agent on 127.0.0.1:9101.
func listenAgentPort() (net.Listener, error) {
	port := strconv.Itoa(demoAgentPort)
	var errs []error
	for x := 1; x <= 254; x++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", x), port))
		if err == nil {
			return ln, nil
		}
		if x <= 2 {
			errs = append(errs, err)
		}
	}
	return nil, fmt.Errorf("the profile agent needs port %d of a loopback address, as the shipped preset collects from the instance's host:%d: %w",
		demoAgentPort, demoAgentPort, errors.Join(errs...))
}
