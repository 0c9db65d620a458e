package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vllmsim"
)

// fleetSpec is one vllmsim process serving N instances of one model
// (vllmsim --fleet-listen), each on its own loopback address so that, as on
// real nodes, the DCGM exporter beside an instance shares its host.
type fleetSpec struct {
	Name string // the fleet's key; its model is "e2e-fleet-<name>"
	N    int
	// Args are extra vllmsim flags (--instance-scenario 1=overload, …).
	Args []string
	// DCGM serves (--dcgm-listen) and scrapes each instance's DCGM surface.
	DCGM bool
	// Engine is the surface the instances show (vllmsim --engine; "": vLLM).
	Engine string
	// Subnet is the third octet of its instances' loopback addresses
	// (fleetHost; 0: 40 + the fleet's index), so that two stacks' fleets
	// never share an address.
	Subnet int
}

// fleet is a started fleetSpec.
type fleet struct {
	Spec  fleetSpec
	Model string
	Addrs []string // instance i's host:port, the alerts' instance label
	DCGM  []string // instance i's DCGM exporter host:port (nil without DCGM)
	Proc  *testenv.Process
}

// fleetHost is fleet k's instance i's loopback address: 127.0.(40+k).(11+i),
// away from the 127.0.0.x the other tests use (the spec's Subnet instead of
// 40+k when set).
func fleetHost(sp fleetSpec, k, i int) string {
	if sp.Subnet != 0 {
		return fmt.Sprintf("127.0.%d.%d", sp.Subnet, 11+i)
	}
	return fmt.Sprintf("127.0.%d.%d", 40+k, 11+i)
}

// startFleets starts one vllmsim per spec and returns the vLLM and DCGM
// targets for Prometheus.
func (s *stack) startFleets(t testing.TB, simBin string, specs []fleetSpec) (targets, dcgm []string) {
	t.Helper()
	for k, sp := range specs {
		// One port for the fleet, as a real fleet serves 8000 everywhere.
		port, dport := strconv.Itoa(testenv.FreePort(t)), strconv.Itoa(testenv.FreePort(t))
		f := &fleet{Spec: sp, Model: "e2e-fleet-" + sp.Name}
		for i := range sp.N {
			f.Addrs = append(f.Addrs, net.JoinHostPort(fleetHost(sp, k, i), port))
			if sp.DCGM {
				f.DCGM = append(f.DCGM, net.JoinHostPort(fleetHost(sp, k, i), dport))
			}
		}
		args := []string{"--fleet-listen=" + strings.Join(f.Addrs, ","), "--model=" + f.Model,
			fmt.Sprintf("--seed=%d", 500+k), "--otlp-endpoint=http://" + s.Jaeger.OTLPHTTP,
			"--otlp-protocol=http/protobuf"}
		if sp.Engine != "" {
			args = append(args, "--engine="+sp.Engine) // SGLang hard-codes its service.name
		} else {
			args = append(args, "--service-name=vllm-server")
		}
		if sp.DCGM {
			args = append(args, "--dcgm-listen="+strings.Join(f.DCGM, ","))
		}
		args = append(args, sp.Args...)
		f.Proc = testenv.StartProcess(t, "vllmsim-fleet-"+sp.Name, exec.Command(simBin, args...))
		s.Fleets[sp.Name] = f
		targets = append(targets, f.Addrs...)
		dcgm = append(dcgm, f.DCGM...)
	}
	// Every fleet starts before the first is waited for: their start-ups overlap.
	for _, f := range s.Fleets {
		for _, a := range f.Addrs {
			f.Proc.WaitHTTP(t, "http://"+a+"/health", 15*time.Second)
		}
		for _, a := range f.DCGM {
			f.Proc.WaitHTTP(t, "http://"+a+"/metrics", 15*time.Second)
		}
	}
	return targets, dcgm
}

// dcgmScrapeConfig is the scrape job for the DCGM exporters ("" for none).
func dcgmScrapeConfig(targets []string) string {
	if len(targets) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("- job_name: dcgm\n  static_configs:\n    - targets:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "        - %q\n", tg)
	}
	return b.String()
}

// The sick instances' faults (vllmsim/README.md, fleet mode and "What a
// fault does").
var (
	// fleetSkewArgs: instance 2 receives 3× the healthy chat traffic its
	// peers get (2.5 req/s each; 7.5 is past one engine's ~4.3 req/s).
	fleetSkewArgs = []string{"--instance-share=2=3"}
	// fleetThrottle is a deep HW slowdown (15 % of max clock: every kernel
	// ×6.7) from 20 s in, so Prometheus holds the GPU's healthy clock as its
	// max, at a light load (throttleLoad, 67 % of the throttled capacity):
	// tokens slow far past the ITL alert (p50 ~0.3 s) with no queue. At
	// healthy's 2.5 req/s a throttled engine saturates, and that reads,
	// rightly, as overload with gpu-degraded contributing.
	fleetThrottle       = "throttle:hw_slowdown:0.15@20s"
	fleetThrottleReason = "hw_slowdown"
	throttleLoad        = "--load=0.5"
	// xidLoad: an XID (every kernel ×3) trips the ITL alert at 1 req/s.
	xidLoad = "--load=1"
)

// fleetCase is what the first run of one instance of one fleet must say.
type fleetCase struct {
	fleet    string
	instance int
	verdict  string
	scope    string
	// contributing must all be among the verdict's contributing factors.
	contributing []string
	// evidence must each be in one of the verdict's evidence lines.
	evidence []string
	// absent must not be among the contributing factors.
	absent []string
}

// TestFleetScopeAndGPU is the proof of "this server, the whole fleet, or the
// GPU": real Prometheus scraping simulated fleets and their DCGM surfaces,
// the shipped rules and playbooks (windows shortened), real Alertmanager and
// the binary. One of 4 instances overloaded is overload + single-instance;
// all 4 are overload + fleet-wide; one receiving 3× its share has the
// imbalance named; a throttled GPU is gpu-degraded with its reason decoded,
// the same without DCGM series is unexplained with "GPU not measured", an XID
// is gpu-degraded naming it. Instances with nothing wrong fire nothing. It
// reports tier 1's PromQL wall time with the peers and GPU steps against the
// snapshot's alone.
func TestFleetScopeAndGPU(t *testing.T) {
	t.Parallel()
	fleetScopeAndGPU(t, "", 0)
}

// fleetScopeAndGPU is TestFleetScopeAndGPU's proof on fleets of engine
// (vllmsim --engine; "": vLLM), their instances on loopback subnets from
// subnet on (0: fleetHost's default).
func fleetScopeAndGPU(t *testing.T, engine string, subnet int) {
	t.Helper()
	fleets := []fleetSpec{
		{Name: "one", N: 4, DCGM: true, Args: []string{"--instance-scenario=1=overload"}},
		{Name: "all", N: 4, DCGM: true, Args: []string{"--scenario=overload"}},
		{Name: "skew", N: 4, DCGM: true, Args: fleetSkewArgs},
		{Name: "hot", N: 4, DCGM: true, Args: []string{throttleLoad, "--instance-gpu=1=" + fleetThrottle}},
		{Name: "blind", N: 4, DCGM: false, Args: []string{throttleLoad, "--instance-gpu=1=" + fleetThrottle}},
		{Name: "xid", N: 4, DCGM: true, Args: []string{xidLoad, "--instance-gpu=2=xid:79"}},
	}
	cases := []fleetCase{
		{fleet: "one", instance: 1, verdict: "overload", scope: "single-instance", contributing: []string{"single-instance"},
			evidence: []string{"only this instance"}},
		{fleet: "all", instance: 0, verdict: "overload", scope: "fleet-wide", contributing: []string{"fleet-wide"},
			evidence: []string{"fleet-wide: "}},
		{fleet: "all", instance: 3, verdict: "overload", scope: "fleet-wide", contributing: []string{"fleet-wide"}},
		{fleet: "skew", instance: 2, verdict: "overload", scope: "single-instance", contributing: []string{"routing-imbalance"},
			evidence: []string{"peers' median arrival rate"}},
		{fleet: "hot", instance: 1, verdict: "gpu-degraded", absent: []string{"routing-imbalance"}, evidence: []string{fleetThrottleReason + ": hardware slowdown", "SM 297/1980 MHz"}},
		{fleet: "blind", instance: 1, verdict: "unexplained", absent: []string{"routing-imbalance"}, evidence: []string{"GPU not measured"}},
		{fleet: "xid", instance: 2, verdict: "gpu-degraded", absent: []string{"routing-imbalance"}, evidence: []string{"XID 79", "fallen off the bus"}},
	}
	for k := range fleets {
		fleets[k].Engine = engine
		if subnet != 0 {
			fleets[k].Subnet = subnet + k
		}
	}
	s := startStack(t, stackOptions{Fleets: fleets, FireAtOnset: true, ShortPlaybooks: true})

	// instance address → (fleet, index)
	type where struct {
		fleet string
		i     int
	}
	byAddr := map[string]where{}
	for name, f := range s.Fleets {
		for i, a := range f.Addrs {
			byAddr[a] = where{name, i}
		}
	}
	want := map[where]fleetCase{}
	for _, c := range cases {
		want[where{c.fleet, c.instance}] = c
	}
	// The "all" fleet's other two instances fire too, and must say fleet-wide.
	for _, i := range []int{1, 2} {
		want[where{"all", i}] = fleetCase{fleet: "all", instance: i, verdict: "overload", scope: "fleet-wide"}
	}

	deadline := time.Now().Add(150 * time.Second)
	first := map[where]*runs.Run{}
	collect := func() {
		for _, lr := range s.runs(t) {
			w, ok := byAddr[lr.Labels["instance"]]
			if !ok || !finished(lr.Status) {
				continue
			}
			if f := first[w]; f == nil || lr.CreatedAt.Before(f.CreatedAt) {
				first[w] = s.run(t, lr.ID)
			}
		}
	}
	for time.Now().Before(deadline) {
		collect()
		done := true
		for _, c := range cases {
			done = done && first[where{c.fleet, c.instance}] != nil
		}
		if done {
			break
		}
		time.Sleep(2 * time.Second)
	}
	// Once more when every run has ended: a re-firing that the cooldown
	// skips ends at once, on a loaded machine before the first run did.
	waitAllFinished(t, s, 60*time.Second)
	collect()

	keys := make([]where, 0, len(first))
	for w := range first {
		keys = append(keys, w)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].fleet != keys[b].fleet {
			return keys[a].fleet < keys[b].fleet
		}
		return keys[a].i < keys[b].i
	})
	var withViews, snapshotOnly []float64
	for _, w := range keys {
		r := first[w]
		c, expected := want[w]
		line := fmt.Sprintf("%s[%d] %s: %s scope=%q %v", w.fleet, w.i, r.Alertname, verdictID(r), scopeOf(r), contributing(r))
		if !expected {
			t.Errorf("%s fired, but nothing is wrong with it\n%s", line, describe(r))
			continue
		}
		if problems := c.check(r); len(problems) > 0 {
			t.Errorf("%s: %s\n%s", line, strings.Join(problems, "; "), describe(r))
			continue
		}
		t.Log(line)
		if snap, all, ok := tier1PromQL(r); ok {
			snapshotOnly, withViews = append(snapshotOnly, snap), append(withViews, all)
		}
	}
	for _, c := range cases {
		if first[where{c.fleet, c.instance}] == nil {
			t.Errorf("%s[%d]: no finished run; alerts firing: %v", c.fleet, c.instance, s.Prom.Query(t, `ALERTS{alertstate="firing"}`))
		}
	}
	if len(withViews) > 0 {
		t.Logf("tier-1 PromQL wall (snapshot ∥ peers ∥ gpu) vs snapshot alone over %d runs: median %.0f ms vs %.0f ms (%.2f×)",
			len(withViews), median(withViews), median(snapshotOnly), median(withViews)/median(snapshotOnly))
	}
}

// check lists how run r differs from the case.
func (c fleetCase) check(r *runs.Run) []string {
	var out []string
	if verdictID(r) != c.verdict {
		out = append(out, "verdict "+verdictID(r)+", want "+c.verdict)
	}
	if c.scope != "" && scopeOf(r) != c.scope {
		out = append(out, fmt.Sprintf("scope %q, want %q", scopeOf(r), c.scope))
	}
	for _, f := range c.contributing {
		if !slices.Contains(contributing(r), f) {
			out = append(out, "no contributing "+f)
		}
	}
	for _, f := range c.absent {
		if slices.Contains(contributing(r), f) {
			out = append(out, "contributing "+f+": its traffic is its peers'")
		}
	}
	ev := ""
	if r.Verdict != nil {
		ev = strings.Join(r.Verdict.Evidence, "\n")
	}
	for _, e := range c.evidence {
		if !strings.Contains(ev, e) {
			out = append(out, fmt.Sprintf("no evidence %q", e))
		}
	}
	return out
}

func scopeOf(r *runs.Run) string {
	if r.Verdict == nil {
		return ""
	}
	return r.Verdict.Scope
}

// tier1PromQL is the wall time of run r's PromQL steps in tier 1 (snapshot,
// peers, gpu: they run in parallel) and the snapshot's alone, in ms.
func tier1PromQL(r *runs.Run) (snapshot, all float64, ok bool) {
	var start, end time.Time
	for _, st := range r.Steps {
		switch st.Kind {
		case "prometheus", "peers", "gpu":
		default:
			continue
		}
		if st.ID == "snapshot" {
			snapshot, ok = float64(st.DurationMS), true
		}
		if start.IsZero() || st.StartedAt.Before(start) {
			start = st.StartedAt
		}
		if st.FinishedAt.After(end) {
			end = st.FinishedAt
		}
	}
	return snapshot, float64(end.Sub(start).Milliseconds()), ok && stepByKind(r, "peers") != nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// TestSGLangFleetScopeAndGPU is TestFleetScopeAndGPU on fleets of SGLang
// servers (2026 era): the shipped SGLang rules and playbooks (their peers and
// gpu steps) tell this server, the whole fleet or the GPU as they do for vLLM.
func TestSGLangFleetScopeAndGPU(t *testing.T) {
	t.Parallel()
	fleetScopeAndGPU(t, vllmsim.EngineSGLang, 60)
}
