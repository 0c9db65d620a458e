package profile

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
	"github.com/autocapture/autocapture/vocab"
)

// TestProfileResumedSweptRecordingIsRecovered: the resumed attempt gets back
// a recording the sweeper stopped after the earlier attempt's daemon died
// (the restart came after the deadline). It sends no start and no stop,
// collects the files that appeared since the saved listing, analyses them
// over the frame from the start to the sweeper's stop, renews its lease
// while it collects, and reports the profile saying it was recovered after a
// restart (not "cut short", and not kept as a baseline: it ran past its
// duration).
func TestProfileResumedSweptRecordingIsRecovered(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir, ProfilerFlushDelay: 50 * time.Millisecond})
	before, err := listSource(context.Background(), profileDirSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	// The earlier attempt's start and the sweeper's stop, straight to the
	// sim (the log is what this attempt sends).
	since := time.Now()
	tgt.sim.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/start_profile", nil))
	time.Sleep(300 * time.Millisecond)
	tgt.sim.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/stop_profile", nil))
	stopped := time.Now()
	f.guard.resume = &vocab.Recording{Target: "http://" + tgt.host, State: vocab.LeaseStopped, Since: since,
		Deadline: since.Add(100 * time.Millisecond), Saved: savedListing{Files: before}.marshal(),
		StoppedBy: "sweeper host/1/abc", StoppedAt: stopped}
	p := buildTestProfile(t, Config{Duration: 5 * time.Second, Collect: Collect{Dir: dir}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.log.count("http:start_profile") + f.log.count("http:stop_profile"); n != 0 {
		t.Errorf("the resumed step sent %d starts or stops, want none", n)
	}
	rec, _ := res.Findings["recovered"].(string)
	if res.Findings["resumed"] != vocab.LeaseStopped || !strings.HasPrefix(rec, "recovered after a restart") ||
		!strings.Contains(rec, "past its deadline") || !strings.Contains(res.Summary, rec) || res.Findings["cut_short"] != nil {
		t.Errorf("findings %v, summary %q: want resumed=stopped and recovered after a restart, not cut short", res.Findings, res.Summary)
	}
	if res.Findings["until"] != stopped {
		t.Errorf("frame until %v, want the sweeper's stop %v", res.Findings["until"], stopped)
	}
	checkSimClean(t, tgt.sim, 1, 1)
	checkStored(t, f.store, res, dir)
	var rep Report
	for _, a := range res.Artifacts {
		if a.Name != profileReportName {
			continue
		}
		rc, err := f.store.Open(context.Background(), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(rc).Decode(&rep)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if rep.Recovered != rec || rep.CutShort != "" || rep.Analysis == nil || rep.Analysis.KernelUS <= 0 {
		t.Errorf("report recovered %q, cut short %q, analysis %v: want the recovery said and GPU time read", rep.Recovered, rep.CutShort, rep.Analysis != nil)
	}
	if kept, _ := f.guard.Baseline(context.Background(), "m"); kept != nil {
		t.Errorf("a recovered frame was kept for comparisons: %+v", kept)
	}
	if n := f.guard.collectRenewals.Load(); n == 0 {
		t.Error("the lease was not renewed while the files were collected")
	}
	if f.guard.held("http://"+tgt.host) != nil || len(f.guard.contractViolations()) > 0 {
		t.Errorf("lease held or contract violated: %v", f.guard.contractViolations())
	}
}

// TestProfileLostFrameFails: a resumed step refused "recorded" because its
// earlier frame's files were left on the server (Lost) fails, saying where
// they are, instead of skipping: the run does not end succeeded without the
// frame it recorded. Nothing is sent.
func TestProfileLostFrameFails(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir})
	f.guard.refuse = &vocab.ProfileRefusal{Reason: vocab.RefusedRecorded, Lost: true, Detail: "an earlier attempt of run r-1's step profile " +
		"started a frame on http://x:1 at 14:00; the sweeper stopped that frame after its owner died, and its files were left on the server (not collected): no second start"}
	p := buildTestProfile(t, Config{Duration: time.Second, Collect: Collect{Dir: dir}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if _, skip := vocab.IsSkip(err); err == nil || skip || vocab.Classify(err) != vocab.ReasonRefused {
		t.Fatalf("err %v: want a failure (refused), not a skip", err)
	}
	if !strings.HasPrefix(err.Error(), "recorded: ") || !strings.HasSuffix(err.Error(), "its files were left on the server at "+dir) {
		t.Errorf("err %q: want the kind first and where the files were left", err)
	}
	if res == nil || res.Findings["refused"] != vocab.RefusedRecorded || res.Findings["files_left"] != "at "+dir ||
		!strings.Contains(res.Summary, "recorded but not collected") {
		t.Fatalf("result %+v: want refused=recorded, files_left and a summary saying the frame was not collected", res)
	}
	if n := f.log.count("http:start_profile") + f.log.count("http:stop_profile"); n != 0 {
		t.Errorf("%d starts or stops sent, want none", n)
	}
}
