package vllmsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A fleet is N instances of one model in one process, as replicas behind a
// load balancer: each its own engine (its own Sim), seed, share of the
// traffic, scenario and GPU faults, each on its own address with its own
// DCGM surface (node "node-<i>").

// FleetOptions configure NewFleet.
type FleetOptions struct {
	// Base applies to every instance (model, engine, profiler, OTLP, tensor
	// parallelism, DCGM names, …). Its Scenario is the default scenario, its
	// Seed the fleet's seed (instance i's is derived from it), its
	// ResourceAttributes are extended with service.instance.id.
	Base Options
	// Instances are the replicas, in order; at least one.
	Instances []InstanceOptions
}

// InstanceOptions are what sets one replica apart.
type InstanceOptions struct {
	// Addr is where the instance is served (host:port); it becomes the spans'
	// service.instance.id, as the alert's instance label names the target.
	Addr string
	// Scenario overrides Base.Scenario ("": the base one).
	Scenario string
	// Share is the instance's weight in the traffic: its built-in load is the
	// scenario's load × Share (0: 1).
	Share float64
	// GPUFaults are injected at start (each after its own delay).
	GPUFaults []GPUFault
	// Hostname is the DCGM Hostname label; default "node-<i>".
	Hostname string
}

// Fleet is a set of instances driven together.
type Fleet struct {
	Instances []*Instance
}

// Instance is one replica: a Sim with its place in the fleet.
type Instance struct {
	*Sim
	Index int
	Addr  string
}

// InstanceSeed is the seed of instance i of a fleet seeded with seed: each
// replica draws different requests, the same fleet seed gives the same runs.
func InstanceSeed(seed uint64, i int) uint64 {
	x := seed + uint64(i)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	return x
}

// NewFleet builds every instance (defaults applied to each); nothing runs
// until Run or Advance.
func NewFleet(fo FleetOptions) (*Fleet, error) {
	if len(fo.Instances) == 0 {
		return nil, errors.New("vllmsim: fleet: no instances")
	}
	f := &Fleet{}
	start := fo.Base.Start
	if start.IsZero() {
		start = time.Now()
	}
	for i, io := range fo.Instances {
		o := fo.Base
		o.Start = start
		o.Seed = InstanceSeed(fo.Base.Seed, i)
		if io.Scenario != "" {
			o.Scenario = io.Scenario
		}
		if io.Share < 0 {
			return nil, fmt.Errorf("vllmsim: fleet instance %d: share %v: want > 0", i, io.Share)
		}
		o.LoadScale = io.Share
		o.GPUFaults = io.GPUFaults
		o.ResourceAttributes = maps.Clone(fo.Base.ResourceAttributes)
		if o.ResourceAttributes == nil {
			o.ResourceAttributes = map[string]string{}
		}
		if io.Addr != "" {
			o.ResourceAttributes["service.instance.id"] = io.Addr
		}
		o.DCGM.Hostname = io.Hostname
		if o.DCGM.Hostname == "" {
			o.DCGM.Hostname = fmt.Sprintf("node-%d", i)
		}
		if p := fo.Base.DCGM.PodMapping; p != nil {
			o.DCGM.PodMapping = &DCGMPod{Namespace: p.Namespace, Container: p.Container, Pod: fmt.Sprintf("%s-%d", p.Pod, i)}
		}
		if fo.Base.Logger != nil {
			o.Logger = fo.Base.Logger.With(zap.Int("instance", i), zap.String("address", io.Addr))
		}
		if o.ProfilerDir != "" {
			o.ProfilerDir = filepath.Join(o.ProfilerDir, fmt.Sprintf("instance-%d", i))
		}
		s, err := New(o)
		if err != nil {
			return nil, fmt.Errorf("vllmsim: fleet instance %d: %w", i, err)
		}
		f.Instances = append(f.Instances, &Instance{Sim: s, Index: i, Addr: io.Addr})
	}
	return f, nil
}

// Advance moves every instance's clock forward by d (virtual time).
func (f *Fleet) Advance(d time.Duration) {
	for _, in := range f.Instances {
		in.Advance(d)
	}
}

// Run drives every instance in real time until ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(f.Instances))
	for i, in := range f.Instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.Run(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close flushes and stops every instance's span exporter.
func (f *Fleet) Close(ctx context.Context) error {
	var errs []error
	for _, in := range f.Instances {
		errs = append(errs, in.Close(ctx))
	}
	return errors.Join(errs...)
}
