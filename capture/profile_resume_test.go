package capture

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
)

// TestProfileLostFrameFails: a resumed step refused "recorded" because its
// earlier frame's files were left on the server (Lost) fails, saying where
// they are, instead of skipping: the run does not end succeeded without the
// frame it recorded. Nothing is sent.
func TestProfileLostFrameFails(t *testing.T) {
	f := newProfileFixture(t)
	dir := t.TempDir()
	tgt := startSim(t, f.log, vllmsim.Options{ProfilerDir: dir})
	f.guard.refuse = &ProfileRefusal{Reason: RefusedRecorded, Lost: true, Detail: "an earlier attempt of run r-1's step profile " +
		"started a frame on http://x:1 at 14:00; the sweeper stopped that frame after its owner died, and its files were left on the server (not collected): no second start"}
	p := buildTestProfile(t, ProfileConfig{Duration: time.Second, Collect: ProfileCollect{Dir: dir}})
	res, err := p.Run(context.Background(), f.input(t, tgt.host, nil))
	if _, skip := IsSkip(err); err == nil || skip || Classify(err) != ReasonRefused {
		t.Fatalf("err %v: want a failure (refused), not a skip", err)
	}
	if !strings.HasPrefix(err.Error(), "recorded: ") || !strings.HasSuffix(err.Error(), "its files were left on the server at "+dir) {
		t.Errorf("err %q: want the kind first and where the files were left", err)
	}
	if res == nil || res.Findings["refused"] != RefusedRecorded || res.Findings["files_left"] != "at "+dir ||
		!strings.Contains(res.Summary, "recorded but not collected") {
		t.Fatalf("result %+v: want refused=recorded, files_left and a summary saying the frame was not collected", res)
	}
	if n := f.log.count("http:start_profile") + f.log.count("http:stop_profile"); n != 0 {
		t.Errorf("%d starts or stops sent, want none", n)
	}
}
