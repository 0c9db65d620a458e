package profile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/vocab"

	"github.com/autocapture/autocapture/torchtrace"
)

// frameRun is one capture as it goes: what the step knows about its frame.
type frameRun struct {
	target string
	client *http.Client
	lease  vocab.ProfileLease
	src    profileSource
	before listing
	// prefix names this capture's files (SGLang's profile_prefix).
	prefix string
	window torchtrace.Window
	// cost is the capture's scrapes of the instance's counters (nil for a
	// resumed attempt, or when /metrics cannot be read); costResult what
	// they say once the stop answered.
	cost       *costRun
	costResult *Cost
	// notRecording says why the stop found nothing recording (SGLang's
	// num_steps auto-stop, a restart); "" when the stop ended the recording.
	notRecording string
	// cut says why the frame ended early ("" when it ran its duration).
	cut string
	// room says, when the step's deadline left less than the frame, how
	// much it left ("" when the frame fits).
	room string
	// recovered says how a resumed attempt got an earlier attempt's frame
	// back ("" for a frame of this attempt).
	recovered string
	// startTook and stopTook are how long start_profile and stop_profile
	// took to answer (0 where this attempt sent neither).
	startTook, stopTook time.Duration
}

// bound is the longest the server can have recorded, on this daemon's clock:
// the window (start answered → stop sent) plus both calls' round trips, for
// the server's recording runs from the start's arrival to the stop's. The
// trace's own frame (its profiler span) is clipped to it, never stretched:
// only a recording that ran on past what the daemon asked for (a server
// whose stop came late) is cut.
func (fr *frameRun) bound() time.Duration {
	return fr.window.End.Sub(fr.window.Start) + fr.startTook + fr.stopTook
}

// Run frames one profile of the target. The order is the safety: opt-out and
// preflight before the lease; "recording" durable before start_profile;
// stop_profile on every path once start may have been sent, on a context
// detached from the step's; the lease released only after a stop the server
// answered (a failed stop leaves it held, for the sweeper or an operator).
func (p *Profile) Run(ctx context.Context, in *vocab.Input) (*vocab.Result, error) {
	if in.Env == nil || in.Env.Targets == nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "profile: no targets client configured")
	}
	target, err := p.target(in)
	if err != nil {
		return nil, err
	}
	pol := profilePolicy(in.Env)
	if why := optedOut(pol, target, in.Alert.Labels); why != "" {
		return &vocab.Result{Findings: map[string]any{"target": target, "opted_out": why}},
			vocab.Skipf("profile %s: opted out: %s", httpTarget(target), why)
	}
	if in.Env.Profiles == nil {
		return nil, vocab.Errorf(vocab.ReasonBadConfig, "profile %s: tier 3 is not available (no profile guard: profiling needs the shared database)", httpTarget(target))
	}
	src, err := p.source(in)
	if err != nil {
		return nil, err
	}
	frame := min(p.cfg.Duration, pol.MaxDuration)
	res := &vocab.Result{Findings: map[string]any{"target": target, "engine": p.cfg.Engine, "expect": p.cfg.Expect, "duration": frame.String()}}
	if frame < p.cfg.Duration {
		res.Findings["duration_capped"] = fmt.Sprintf("%s capped to profiling.max_duration %s", p.cfg.Duration, pol.MaxDuration)
	}
	fr := &frameRun{target: target, client: in.Env.Targets, src: src, prefix: capturePrefix(in.RunID, in.StepID)}
	if err := p.preflight(ctx, fr.client, target); err != nil {
		res.Summary = fmt.Sprintf("profile %s: the server does not answer: %s", httpTarget(target), vocab.Classify(err))
		return res, err
	}
	lease, err := in.Env.Profiles.Acquire(ctx, vocab.LeaseRequest{Target: target, RunID: in.RunID, Plan: in.Plan, StepID: in.StepID,
		Hold: p.tune.hold, Cooldown: p.cfg.Cooldown})
	var refusal *vocab.ProfileRefusal
	if errors.As(err, &refusal) {
		// The reason leads with the kind (busy, paused, budget, cooldown,
		// recorded) and the finding `refused` carries it, so `when`, the
		// thread and the API can tell a held server from a spent budget.
		res.Findings["refused"] = refusal.Reason
		if refusal.Lost {
			return p.lost(res, target, refusal)
		}
		res.Summary = fmt.Sprintf("profile %s refused (%s): %s", httpTarget(target), refusal.Reason, refusal.Detail)
		return res, vocab.Skipf("%s: %s", refusal.Reason, refusal.Detail)
	}
	if err != nil {
		return res, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: lease: %w", httpTarget(target), err)}
	}
	fr.lease = lease
	if rec := lease.Resumed(); rec != nil && rec.State != vocab.LeaseHeld {
		return p.resume(ctx, in, res, fr, rec)
	}
	return p.firstAttempt(ctx, in, res, fr, frame)
}

// target is the configured base URL, else http://<instance label>.
func (p *Profile) target(in *vocab.Input) (string, error) {
	if p.cfg.Target != "" {
		if err := checkBaseURL(p.cfg.Target); err != nil {
			return "", vocab.Errorf(vocab.ReasonBadConfig, "profile: target %q: %v", p.cfg.Target, err)
		}
		return baseURL(p.cfg.Target), nil
	}
	inst := in.Alert.Labels["instance"]
	if !stepkit.ValidHostPort(inst) {
		return "", vocab.Errorf(vocab.ReasonBadConfig, "profile: no target and the alert's instance label %q is not host:port", inst)
	}
	return "http://" + inst, nil
}

// firstAttempt lists, makes the recording durable, starts, frames, stops and
// collects.
func (p *Profile) firstAttempt(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, frame time.Duration) (*vocab.Result, error) {
	if why := p.lastStallRefusal(ctx, in, fr.target); why != "" {
		return p.costSkip(ctx, in, res, fr, why)
	}
	before := beforeFromRun(in, fr.target)
	if why := p.ceilingRefusal(in, before); why != "" {
		return p.costSkip(ctx, in, res, fr, why)
	}
	listed, err := listSource(ctx, fr.src)
	if err != nil {
		p.release(ctx, in, fr)
		return res, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: %w", httpTarget(fr.target), err)}
	}
	fr.before = listed
	lp := p.planLoad(ctx, in, fr.client, fr.target)
	if lp.why != "" {
		res.Findings["load"] = lp.why
	}
	fr.cost = p.startCost(ctx, fr, before)
	fr.room = frameRoom(ctx, frame)
	if fr.room != "" {
		res.Findings["frame_room"] = fr.room
	}
	recorded := time.Now()
	saved := savedListing{Files: listed, Engine: p.cfg.Engine, Prefix: fr.prefix}
	if _, err := fr.lease.Recording(ctx, frame, saved.marshal()); err != nil {
		p.release(ctx, in, fr) // start_profile was never sent
		return res, &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: record the recording before start: %w", httpTarget(fr.target), err)}
	}
	if ctx.Err() != nil { // cancelled before the start: nothing to stop
		p.notStarted(ctx, in, fr, "cancelled before start_profile was sent")
		return res, p.cutByContext(ctx, fr, 0)
	}
	sent := time.Now()
	var body []byte
	if p.cfg.Engine == vocab.EngineSGLang {
		body = p.sglangStartBody(fr.prefix)
	}
	notSent, err := startProfile(ctx, fr.client, fr.target, p.cfg.Engine, body)
	fr.startTook = time.Since(sent)
	if errors.Is(err, errNotArmed) {
		res.Findings["armed"] = false
		res.Findings["how_to_arm"] = howToArm
		res.Summary = fmt.Sprintf("profile %s: profiler not armed (start_profile answered 404): %s", httpTarget(fr.target), howToArm)
		p.notStarted(ctx, in, fr, "start_profile answered 404: the profiler is not armed")
		return res, err
	}
	if errors.Is(err, errSGLangRefused) {
		why := sglangStartRefused(fr.target, err)
		res.Findings["start_refused"] = why
		p.notStarted(ctx, in, fr, why)
		res.Summary = "profile " + why
		return res, err
	}
	if err != nil && notSent {
		p.notStarted(ctx, in, fr, "start_profile never reached the server: "+err.Error())
		res.Summary = fmt.Sprintf("profile %s: start_profile failed: %s", httpTarget(fr.target), vocab.Classify(err))
		return res, err
	}
	fr.window.Start = stepkit.EnvNow(in.Env)
	if err != nil { // it may have reached the server: the stop is owed all the same
		fr.window.End = fr.window.Start
		if stopErr := p.stop(ctx, in, fr); stopErr == nil {
			p.release(ctx, in, fr)
		}
		res.Summary = fmt.Sprintf("profile %s: start_profile failed: %s (stop sent)", httpTarget(fr.target), vocab.Classify(err))
		return res, err
	}
	res.Findings["armed"] = true
	// The frame ends at the recording's durable deadline (Recording: since +
	// frame), timed from the write rather than the start's answer: a slow
	// start shortens the frame instead of running past "stop by D", where
	// the sweeper would take the lease (runner: stopGrace).
	cutErr := p.frame(ctx, in, res, fr, frame-time.Since(recorded), lp)
	fr.window.End = stepkit.EnvNow(in.Env)
	return p.finish(ctx, in, res, fr, cutErr)
}

// finish stops the recording and, once the server answered, measures its
// cost and collects.
func (p *Profile) finish(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, cutErr error) (*vocab.Result, error) {
	if err := p.stop(ctx, in, fr); err != nil {
		res.Findings["stop_error"] = err.Error()
		if errors.Is(err, vocab.ErrLeaseLost) {
			res.Findings["lease_lost"] = true
			res.Summary = fmt.Sprintf("profile %s: the lease was taken over before the stop (the sweeper stops the server past the deadline); nothing collected",
				httpTarget(fr.target))
			return res, errors.Join(err, cutErr)
		}
		res.Findings["stop_seconds"] = fr.stopTook.Seconds()
		res.Summary = fmt.Sprintf("profile %s: stop_profile failed after %s: the target stays leased (no new start) until a stop is answered or an operator clears it",
			httpTarget(fr.target), fr.stopTook.Round(time.Millisecond))
		return res, errors.Join(err, cutErr)
	}
	p.measureStop(ctx, in, fr)
	return p.collectAndReport(ctx, in, res, fr, cutErr)
}

// collectAndReport gathers the files, reports and releases the lease. It
// runs on a context detached from the step's (bounded): a resolved alert's
// partial profile is kept, and the lease ends only after collection.
func (p *Profile) collectAndReport(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, cutErr error) (*vocab.Result, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.tune.collect)
	defer cancel()
	defer p.release(cctx, in, fr)
	res.Findings["since"] = fr.window.Start
	res.Findings["until"] = fr.window.End
	res.Findings["stop_seconds"] = fr.stopTook.Seconds()
	if fr.cut != "" {
		res.Findings["cut_short"] = fr.cut
	}
	if fr.recovered != "" {
		res.Findings["recovered"] = fr.recovered
	}
	if fr.notRecording != "" {
		res.Findings["already_stopped"] = fr.notRecording
	}
	defer p.keepLease(cctx, in, fr)()
	var files []collected
	if fr.src != nil {
		found, stable, err := p.settle(cctx, fr.src, fr.before, fr.prefix)
		if err != nil {
			res.Findings["collect_error"] = err.Error()
		}
		if !stable && len(found) > 0 {
			res.Findings["unsettled"] = true
		}
		files = p.collect(cctx, in, fr.src, found, fr.bound())
	} else {
		res.Findings["collect"] = "none configured: the files stay in the server's profiler folder"
	}
	p.report(cctx, in, res, fr, files)
	return res, cutErr
}

// stop sends stop_profile, bounded by stop_timeout alone: it runs on a
// context detached from the step's (Background by intent: a cancelled run, a
// resolved alert or a shutdown still owe the server its stop). The lease
// records stopping before and stopped or stop_failed after.
func (p *Profile) stop(ctx context.Context, in *vocab.Input, fr *frameRun) error {
	base := context.WithoutCancel(ctx)
	if err := p.leaseWrite(base, func(c context.Context) error { return fr.lease.Stopping(c, p.cfg.StopTimeout) }); err != nil {
		if errors.Is(err, vocab.ErrLeaseLost) { // the sweeper (or an operator) has it: the stop is theirs
			stepkit.Logger(in).Warn("The profile lease was taken over before the stop; its new holder stops the server.", zap.Error(err))
			fr.lease = nil
			return &vocab.Error{Reason: vocab.ReasonCancelled, Err: fmt.Errorf("profile %s: %w: the stop was left to its new holder", httpTarget(fr.target), err)}
		}
		stepkit.Logger(in).Warn("The lease could not record the stop; sending it anyway.", zap.Error(err))
	}
	p.scrapeBeforeStop(base, fr)
	sctx, cancel := context.WithTimeoutCause(base, p.cfg.StopTimeout,
		fmt.Errorf("stop_profile did not answer within stop_timeout %s", p.cfg.StopTimeout))
	defer cancel()
	begun := time.Now()
	err := stopFor(sctx, fr.client, fr.target, p.cfg.Engine)
	fr.stopTook = time.Since(begun)
	if errors.Is(err, ErrNotRecording) {
		// SGLang had already stopped: its num_steps auto-stop wrote the
		// files (collected as usual), or it restarted. Nothing records.
		fr.notRecording = "stop_profile answered that profiling was not in progress: the recording had already stopped " +
			"(num_steps reached, or the server restarted)"
		stepkit.Logger(in).Info("stop_profile found nothing recording; taking the stop as done.", zap.String("target", fr.target))
		err = nil
	}
	if errors.Is(err, ErrNotArmed) {
		// No profiler there now (the server restarted unarmed mid-frame):
		// nothing records, so nothing is owed; what it wrote before is
		// still collected.
		stepkit.Logger(in).Warn("stop_profile answered 404: the server has no profiler now; nothing records there.", zap.String("target", fr.target))
		why := "stop_profile answered 404: the server has no profiler now (restarted?)"
		if fr.cut != "" {
			why = fr.cut + "; " + why
		}
		fr.cut, err = why, nil
	}
	if err != nil {
		if sctx.Err() != nil {
			err = &vocab.Error{Reason: vocab.ReasonTimeout, Err: fmt.Errorf("profile %s: %w", httpTarget(fr.target), context.Cause(sctx))}
		} else {
			err = &vocab.Error{Reason: vocab.Classify(err), Err: fmt.Errorf("profile %s: stop_profile: %w", httpTarget(fr.target), err)}
		}
		if lerr := p.leaseWrite(base, func(c context.Context) error { return fr.lease.StopFailed(c, err.Error()) }); lerr != nil {
			stepkit.Logger(in).Error("The lease could not record the failed stop.", zap.Error(lerr))
		}
		stepkit.Logger(in).Error("stop_profile failed; the target stays leased.", zap.String("target", fr.target), zap.Error(err))
		fr.lease = nil // no longer this step's to release
		return err
	}
	if lerr := p.leaseWrite(base, fr.lease.Stopped); lerr != nil {
		stepkit.Logger(in).Warn("The lease could not record the answered stop.", zap.Error(lerr))
	}
	return nil
}

// leaseWrite runs one lease write under its own bound.
func (p *Profile) leaseWrite(base context.Context, f func(context.Context) error) error {
	c, cancel := context.WithTimeout(base, p.tune.leaseWrite)
	defer cancel()
	return f(c)
}

// notStarted ends a lease whose recording was made durable but never began
// (ProfileLease.NotStarted): nothing is owed a stop.
func (p *Profile) notStarted(ctx context.Context, in *vocab.Input, fr *frameRun, why string) {
	if fr.lease == nil {
		return
	}
	l := fr.lease
	fr.lease = nil
	if err := p.leaseWrite(context.WithoutCancel(ctx), func(c context.Context) error { return l.NotStarted(c, why) }); err != nil {
		stepkit.Logger(in).Warn("The profile lease of a recording that never began could not be ended; the sweeper will send it a stop.", zap.Error(err))
	}
}

// release ends the lease, once: after a stopped capture was collected, or
// when start_profile was never sent.
func (p *Profile) release(ctx context.Context, in *vocab.Input, fr *frameRun) {
	if fr.lease == nil {
		return
	}
	l := fr.lease
	fr.lease = nil
	if err := p.leaseWrite(context.WithoutCancel(ctx), l.Release); err != nil {
		stepkit.Logger(in).Warn("The profile lease could not be released; it expires on its own.", zap.Error(err))
	}
}

// stopRequester is a lease that knows who asked for the stop (the runner's
// does: POST /api/v1/runs/{id}/stop-profile records the caller), for the
// step's record.
type stopRequester interface{ StopRequestedBy() string }
