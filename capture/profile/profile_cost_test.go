package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// runScrape runs the real scrape step against the input's instance, over a
// one-second gap, as a run's tier 1 does before the profile.
func runScrape(t *testing.T, in *vocab.Input) *vocab.Result {
	t.Helper()
	st, err := scrape.New(scrape.Config{Gap: time.Second, MinRequests: -1})
	if err != nil {
		t.Fatal(err)
	}
	sin := *in
	sin.StepID = "scrape"
	res, err := st.Run(context.Background(), &sin)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return res
}

// stallGuard is the fake guard with a StallMemory, as the runner's plane has.
type stallGuard struct {
	*fakeGuard
	mu     sync.Mutex
	stalls map[string]time.Duration
	wrote  []vocab.LeaseRequest
}

func (g *stallGuard) RecordStall(_ context.Context, req vocab.LeaseRequest, stall time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stalls[req.Target] = stall
	g.wrote = append(g.wrote, req)
	return nil
}

func (g *stallGuard) LastStall(_ context.Context, target string) (time.Duration, time.Time, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.stalls[target]
	return s, time.Now().Add(-time.Hour), ok, nil
}

func withStallMemory(f *profileFixture) *stallGuard {
	g := &stallGuard{fakeGuard: f.guard, stalls: map[string]time.Duration{}}
	f.env.Profiles = g
	return g
}

// costOfRun reads the cost finding back as the run's JSON has it.
func costOfRun(t *testing.T, res *vocab.Result) Cost {
	t.Helper()
	b, err := json.Marshal(res.Findings["cost"])
	if err != nil {
		t.Fatal(err)
	}
	var c Cost
	if err := json.Unmarshal(b, &c); err != nil || c.Before == nil {
		t.Fatalf("cost finding %s (%v): want before, frame and stop", b, err)
	}
	return c
}

// TestProfileCostMeasuresTheStopsStall: for both engines the capture
// measures what its stop cost serving, from the instance's own /metrics:
// SGLang's export freezes the scheduler, vLLM's flush blocks the engine.
// The stall is near what the sim froze, said in the summary and the run's
// JSON, and remembered for the target's next capture.
func TestProfileCostMeasuresTheStopsStall(t *testing.T) {
	for _, engine := range []string{vocab.EngineSGLang, vocab.EngineVLLM} {
		t.Run(engine, func(t *testing.T) {
			f := newProfileFixture(t)
			mem := withStallMemory(f)
			dir := t.TempDir()
			// A steady open-loop load: a token rate to hold the stop to.
			o := vllmsim.Options{ProfilerDir: dir, ProfilerLayers: 4, ProfilerFlushDelay: time.Second, Load: 8}
			var tgt *simTarget
			if engine == vocab.EngineSGLang {
				o.ProfilerExportRate = 60e3 // bytes/s: about a second for these traces
				tgt = sglangSim(t, f.log, o)
			} else {
				tgt = startSim(t, f.log, o)
			}
			p := buildTestProfile(t, Config{Engine: engine, Duration: time.Second, Collect: Collect{Dir: dir}})
			// The stretch before: the run's scrape step over a second of
			// steady traffic, past the sim's first second (its load ramps
			// up from nothing).
			time.Sleep(time.Second)
			in := f.input(t, tgt.host, nil)
			in.Prior = map[string]*vocab.Result{"scrape": runScrape(t, in)}
			res, err := p.Run(context.Background(), in)
			if err != nil {
				t.Fatalf("run: %v (%+v)", err, res)
			}
			c := costOfRun(t, res)
			truth := time.Second // vLLM: the flush delay
			if st := tgt.sim.Profiler(); engine == vocab.EngineSGLang {
				if len(st.Stalls) != 1 {
					t.Fatalf("sim stalls %+v", st.Stalls)
				}
				truth = st.Stalls[0].Stall
			}
			b, _ := json.Marshal(c)
			t.Logf("%s: %s; measured stall %.2f s, the sim froze %v; cost %s", engine, c.Summary, c.StallSeconds, truth, b)
			if !c.Measured || c.Before.TokensPerSecond == nil || *c.Before.TokensPerSecond <= 0 || !strings.Contains(c.Before.From, "step scrape") {
				t.Fatalf("no token rate before the frame from the run's scrape: %+v", c.Before)
			}
			if got := time.Duration(c.StallSeconds * float64(time.Second)); got < truth/2 || got > truth+2*time.Second {
				t.Errorf("measured stall %v, the sim froze serving %v", got, truth)
			}
			said := strings.Contains(c.Summary, "stop froze serving") || strings.Contains(c.Summary, " s lost")
			if !said || !strings.Contains(res.Summary, c.Summary) {
				t.Errorf("summary %q (step %q): want the freeze said", c.Summary, res.Summary)
			}
			if c.Stop == nil || c.Stop.TokensPerSecond == nil || *c.Stop.TokensPerSecond >= 0.5**c.Before.TokensPerSecond {
				t.Errorf("tokens/s during the stop %+v vs before %v: the freeze is not in the rate", c.Stop, *c.Before.TokensPerSecond)
			}
			if len(mem.wrote) != 1 || mem.wrote[0].RunID != "run-1" || mem.stalls["http://"+tgt.host] != time.Duration(c.StallSeconds*float64(time.Second)) {
				t.Errorf("stall remembered %v for %v, want %.3f s for this run", mem.stalls, mem.wrote, c.StallSeconds)
			}
		})
	}
}

// TestProfileCostBoundsSkipBeforeTheStart: a target whose last capture
// stalled serving past max_last_stall, or whose latency is already past a
// ceiling (the run's tier-1 p99, else the instance's /metrics just
// before), is not profiled: no start is sent and the lease is released.
func TestProfileCostBoundsSkipBeforeTheStart(t *testing.T) {
	for name, tc := range map[string]struct {
		cost   CostBounds
		prior  map[string]float64
		scrape bool // the run's scrape step read the instance
		stall  time.Duration
		want   string
	}{
		"last stall":             {cost: CostBounds{MaxLastStall: 2 * time.Second}, stall: 5 * time.Second, want: "stalled serving 5s, over cost.max_last_stall 2s"},
		"itl ceiling, scraped":   {cost: CostBounds{MaxITL: time.Microsecond}, scrape: true, want: "inter-token latency p99 is already"},
		"ttft ceiling, snapshot": {cost: CostBounds{MaxTTFT: 2 * time.Second}, prior: map[string]float64{vocab.SigTTFTP99: 3.5}, want: "step metrics's ttft_p99"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newProfileFixture(t)
			mem := withStallMemory(f)
			dir := t.TempDir()
			tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond, Load: 8})
			if tc.stall > 0 {
				mem.stalls["http://"+tgt.host] = tc.stall
			}
			in := f.input(t, tgt.host, nil)
			in.Prior = map[string]*vocab.Result{}
			if tc.prior != nil {
				in.Prior["metrics"] = &vocab.Result{Signals: tc.prior}
			}
			if tc.scrape {
				time.Sleep(time.Second) // the sim's load ramps up from nothing
				in.Prior["scrape"] = runScrape(t, in)
			}
			p := buildTestProfile(t, Config{Duration: 300 * time.Millisecond, Cost: tc.cost, Collect: Collect{Dir: dir}})
			res, err := p.Run(context.Background(), in)
			if _, skipped := vocab.IsSkip(err); !skipped {
				t.Fatalf("run: %v (%+v), want a skip", err, res)
			}
			if why, _ := res.Findings["cost_skipped"].(string); !strings.Contains(why, tc.want) {
				t.Errorf("cost_skipped %q, want %q", why, tc.want)
			}
			if n := f.log.count("http:start_profile"); n != 0 {
				t.Errorf("start sent %d times", n)
			}
			if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
				t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
			}
		})
	}
	// Under its bounds the same target is profiled.
	f := newProfileFixture(t)
	mem := withStallMemory(f)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond})
	mem.stalls["http://"+tgt.host] = time.Second
	p := buildTestProfile(t, Config{Duration: 300 * time.Millisecond, Cost: CostBounds{MaxLastStall: 2 * time.Second, MaxITL: time.Minute},
		Collect: Collect{Dir: dir}})
	if res, err := p.Run(context.Background(), f.input(t, tgt.host, nil)); err != nil {
		t.Fatalf("under the bounds: %v (%v)", err, res.Findings["cost_skipped"])
	}
}

// TestCostOf: the frame and the stop are held to the stretch before: a
// decode and first-token change of 5% or more is said, the stall is the
// stop's length times the token rate it lost, and without a rate before
// the stop's length is the (unmeasured) stall.
func TestCostOf(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	before := &CostWindow{Seconds: 5, TTFTMean: f(0.2), ITLMean: f(0.02), TokensPerSecond: f(400)}
	for name, tc := range map[string]struct {
		before, frame, stop *CostWindow
		stopTook            time.Duration
		stall               float64
		measured            bool
		summary             string
	}{
		"sglang freeze": {before, &CostWindow{Seconds: 5, TTFTMean: f(0.2), ITLMean: f(0.0262), TokensPerSecond: f(390)},
			&CostWindow{Seconds: 2, TokensPerSecond: f(0)}, 2 * time.Second, 2, true,
			"cost: decode 31% slower for 5.0 s, stop froze serving 2.0 s"},
		"partial loss": {before, &CostWindow{Seconds: 5, TTFTMean: f(0.3), ITLMean: f(0.0201), TokensPerSecond: f(400)},
			&CostWindow{Seconds: 4, TokensPerSecond: f(200)}, 4 * time.Second, 2, true,
			"cost: first tokens 50% slower, decode unchanged for 5.0 s, stop took 4.0 s, serving 2.0 s lost"},
		// A capture cannot speed serving up: a frame faster than before is noise.
		"faster frame": {before, &CostWindow{Seconds: 5, Requests: 12, TTFTMean: f(0.1), ITLMean: f(0.015), TokensPerSecond: f(400)},
			&CostWindow{Seconds: 1, TokensPerSecond: f(400)}, time.Second, 0, true,
			"cost: no first-token slowdown measured (±50% noise over 12 requests), no decode slowdown measured for 5.0 s (±25% noise), stop took 1.0 s, serving 0.0 s lost"},
		"idle before": {&CostWindow{Seconds: 5, TokensPerSecond: f(0)}, &CostWindow{Seconds: 5}, &CostWindow{Seconds: 1.5},
			1500 * time.Millisecond, 1.5, false,
			"cost: no decode seen in the 5.0 s frame, stop took 1.5 s (no traffic before it to measure a stall by)"},
	} {
		t.Run(name, func(t *testing.T) {
			c := costOf(tc.before, tc.frame, tc.stop, tc.stopTook)
			if d := c.StallSeconds - tc.stall; d > 1e-9 || d < -1e-9 || c.Measured != tc.measured || c.Summary != tc.summary {
				t.Errorf("stall %v measured %v %q; want %v %v %q", c.StallSeconds, c.Measured, c.Summary, tc.stall, tc.measured, tc.summary)
			}
		})
	}
}

// TestCostReadsSGLangsExposition: SGLang's names are read, and a family
// SGLang does not show yet (its registry adds a series with the first
// request) counts as empty, so the stretch from an idle start is measured.
func TestCostReadsSGLangsExposition(t *testing.T) {
	var body atomic.Value
	body.Store("# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 0.0\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body.Load()) }))
	defer srv.Close()
	p := buildTestProfile(t, Config{Engine: vocab.EngineSGLang})
	a, ok := p.scrapeCost(context.Background(), srv.Client(), srv.URL)
	if !ok || a.ttft.Count != 0 || a.tokens() != 0 {
		t.Fatalf("idle scrape %+v ok %v", a, ok)
	}
	body.Store(`# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="m"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 0.8
sglang:time_to_first_token_seconds_count{model_name="m"} 4.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="m"} 90.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 100.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 2.5
sglang:inter_token_latency_seconds_count{model_name="m"} 100.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{is_streaming="true",model_name="m"} 60.0
sglang:generation_tokens_total{is_streaming="false",model_name="m"} 40.0
`)
	b, ok := p.scrapeCost(context.Background(), srv.Client(), srv.URL)
	if !ok {
		t.Fatal("second scrape failed")
	}
	b.at = a.at.Add(2 * time.Second)
	w := between(a, b)
	if w.Requests != 4 || w.TTFTMean == nil || *w.TTFTMean != 0.2 || w.ITLMean == nil || *w.ITLMean != 0.025 ||
		w.TokensPerSecond == nil || *w.TokensPerSecond != 52 {
		b, _ := json.Marshal(w)
		t.Errorf("stretch %s: want 4 first tokens at 0.2 s mean, ITL 0.025 s, (4+100)/2 s = 52 tokens/s", b)
	}
}
