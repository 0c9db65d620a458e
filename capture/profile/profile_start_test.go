package profile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// TestProfileStartsAtOnceAndATimeoutCutsTheFrame: start_profile goes out
// within a second of the step's start (no live stretch measured before it:
// the run's scrape is the stretch before), and a step timeout shorter than
// the frame records a cut-short capture, stopped and collected, whose reply
// says in words that the timeout left no room for the frame.
func TestProfileStartsAtOnceAndATimeoutCutsTheFrame(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond, Load: 8})
	time.Sleep(time.Second) // the sim's load ramps up from nothing
	in := f.input(t, tgt.host, nil)
	in.Prior = map[string]*vocab.Result{"scrape": runScrape(t, in)}
	const frame, timeout = 20 * time.Second, 2 * time.Second
	p := buildTestProfile(t, Config{Duration: frame, Collect: Collect{Dir: dir}})
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, context.DeadlineExceeded)
	defer cancel()
	begun := time.Now()
	res, err := p.Run(ctx, in)
	sent := f.log.when("http:start_profile")
	if sent.IsZero() {
		t.Fatalf("start_profile never sent (err %v)", err)
	}
	took := sent.Sub(begun)
	t.Logf("start_profile sent %v after the step began; frame cut: %v", took, res != nil && res.Findings["cut_short"] != nil)
	if took > time.Second {
		t.Errorf("start_profile went out %v after the step began, want within 1 s", took)
	}
	if vocab.Classify(err) != vocab.ReasonTimeout {
		t.Errorf("err %v (reason %s): want the step's timeout", err, vocab.Classify(err))
	}
	if res == nil {
		t.Fatal("no result for the cut-short capture")
	}
	cut, _ := res.Findings["cut_short"].(string)
	if !strings.Contains(cut, "the step's timeout left") || !strings.Contains(cut, "of the 20s frame") ||
		!strings.Contains(res.Summary, "cut short: "+cut) {
		t.Errorf("cut_short %q, summary %q: want the timeout's room for the frame said in words", cut, res.Summary)
	}
	if room, _ := res.Findings["frame_room"].(string); room == "" {
		t.Errorf("no frame_room finding: %v", res.Findings)
	}
	if c := costOfRun(t, res); c.Frame == nil || !strings.HasPrefix(c.Summary, "cost: ") {
		t.Errorf("cost %+v: want the cut frame measured against the run's scrape", c)
	}
	checkSimClean(t, tgt.sim, 1, 1)
	checkStored(t, f.store, res, dir)
	if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
		t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
	}
}
