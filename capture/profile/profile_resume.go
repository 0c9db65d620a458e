package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"
	"go.uber.org/zap"
)

// A resumed attempt of the profile step: what an earlier attempt of the same
// step made durable on its lease (ProfileLease.Resumed) is stopped if it may
// still record, then collected; never started again.

// resume picks up an earlier attempt of this step from what its lease made
// durable: a recording (or a stop that was under way) is stopped first, then
// collected against the listing saved before its start. No new start.
func (p *Profile) resume(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, rec *vocab.Recording) (*vocab.Result, error) {
	res.Findings["resumed"] = rec.State
	var saved savedListing
	if len(rec.Saved) > 0 {
		if err := json.Unmarshal(rec.Saved, &saved); err != nil {
			stepkit.Logger(in).Warn("The saved pre-start listing could not be read; collecting every file.", zap.Error(err))
		}
	}
	fr.before = saved.Files
	if saved.Prefix != "" {
		fr.prefix = saved.Prefix
	}
	fr.window.Start = rec.Since
	fr.cut = "resumed after an interruption (state " + rec.State + ")"
	switch rec.State {
	case vocab.LeaseRecording, vocab.LeaseStopping:
		res.Findings["armed"] = true
	case vocab.LeaseStopped:
		res.Findings["armed"] = true
		fr.window.End = stepkit.EnvNow(in.Env)
		if rec.StoppedBy != "" {
			p.recoveredSwept(fr, rec)
		}
		return p.collectAndReport(ctx, in, res, fr, nil)
	default: // stop_failed and anything unknown: not ours to stop or release
		res.Summary = fmt.Sprintf("profile %s: an earlier attempt left the lease %s: no new start until a stop is answered or an operator clears it",
			httpTarget(fr.target), rec.State)
		return res, vocab.Errorf(vocab.ReasonRefused, "profile %s: lease is %s from an earlier attempt", httpTarget(fr.target), rec.State)
	}
	fr.window.End = stepkit.EnvNow(in.Env)
	return p.finish(ctx, in, res, fr, nil)
}

// recoveredSwept takes up a recording the sweeper stopped after the earlier
// attempt's daemon died (typically a restart later than the recording's
// deadline): it ran whole and then some, until the sweeper's stop, and this
// attempt collects it with no second start.
func (p *Profile) recoveredSwept(fr *frameRun, rec *vocab.Recording) {
	fr.cut = ""
	stopped := "when its stop was answered"
	if !rec.StoppedAt.IsZero() {
		fr.window.End = rec.StoppedAt
		stopped = fmt.Sprintf("at %s", rec.StoppedAt.UTC().Format("15:04:05.000Z"))
		if late := rec.StoppedAt.Sub(rec.Deadline); !rec.Deadline.IsZero() && late > 0 {
			stopped += fmt.Sprintf(", %s past its deadline", late.Round(time.Millisecond))
		}
	}
	fr.recovered = "recovered after a restart: the earlier attempt's daemon died mid-frame, the sweeper stopped the recording " +
		stopped + ", and this attempt collected its files with no second start"
}

// lost reports a refusal whose earlier frame was recorded and stopped but
// whose files were left on the server uncollected: a failure saying where
// they are, so the run does not end succeeded without the frame it recorded.
func (p *Profile) lost(res *vocab.Result, target string, r *vocab.ProfileRefusal) (*vocab.Result, error) {
	where := "in its profiler folder (torch_profiler_dir)"
	switch c := p.cfg.Collect; {
	case c.Dir != "":
		where = "at " + c.Dir
	case c.Agent != "":
		where = "in the folder the agent " + c.Agent + " serves"
	}
	res.Findings["files_left"] = where
	res.Summary = fmt.Sprintf("profile %s: the frame was recorded but not collected: %s; its files were left on the server %s",
		httpTarget(target), r.Detail, where)
	return res, vocab.Errorf(vocab.ReasonRefused, "%s: %s; its files were left on the server %s", r.Reason, r.Detail, where)
}
