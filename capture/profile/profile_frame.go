package profile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/vocab"
)

// frame waits out the recording, renewing the lease, with the load running;
// it ends early on an operator's stop, a failed renewal or the step's context
// (run cancelled, alert resolved, shutdown, timeout): then it returns that
// context's error, classified.
func (p *Profile) frame(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, frame time.Duration, lp loadPlan) error {
	fctx, cancel := context.WithCancel(ctx)
	var load loadOutcome
	loadDone := make(chan struct{})
	if lp.send {
		go func() { defer close(loadDone); p.runLoad(fctx, in, fr.client, fr.target, &load) }()
	} else {
		close(loadDone)
	}
	defer func() {
		cancel()
		<-loadDone
		if lp.send {
			res.Findings["load"] = map[string]int64{"sent": load.sent.Load(), "ok": load.ok.Load(), "failed": load.failed.Load()}
			if e := load.firstErr.Load(); e != nil {
				res.Findings["load_error"] = clip.Line(*e, stepkit.MaxErrorText)
			}
		}
	}()
	timer := time.NewTimer(frame)
	defer timer.Stop()
	tick := time.NewTicker(p.tune.renewEvery)
	defer tick.Stop()
	begun := time.Now()
	for {
		select {
		case <-timer.C:
			return nil
		case <-fr.lease.StopRequested():
			fr.cut = "an operator asked to stop"
			if by, ok := fr.lease.(stopRequester); ok && by.StopRequestedBy() != "" {
				fr.cut += " (" + by.StopRequestedBy() + ")"
			}
			return nil
		case <-ctx.Done():
			return p.cutByContext(ctx, fr, time.Since(begun))
		case <-tick.C:
			if err := fr.lease.Renew(ctx, p.tune.hold); err != nil {
				if ctx.Err() != nil {
					return p.cutByContext(ctx, fr, time.Since(begun))
				}
				fr.cut = "the lease could not be renewed: " + err.Error()
				stepkit.Logger(in).Warn("The profile lease could not be renewed; stopping now.", zap.Error(err))
				return nil
			}
		}
	}
}

// frameRoom says, before the start, how much of the frame the step's
// deadline leaves when it is less than the frame; "" when the frame fits.
// The capture starts all the same (a short frame is still evidence) and is
// cut at the deadline.
func frameRoom(ctx context.Context, frame time.Duration) string {
	dl, ok := ctx.Deadline()
	if left := time.Until(dl); ok && left < frame {
		return fmt.Sprintf("the step's timeout left %.1f s of the %s frame", max(left, 0).Seconds(), frame)
	}
	return ""
}

func (p *Profile) cutByContext(ctx context.Context, fr *frameRun, after time.Duration) error {
	cause := context.Cause(ctx)
	fr.cut = cause.Error()
	reason := vocab.ReasonCancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = vocab.ReasonTimeout
		if fr.room != "" {
			fr.cut = fr.room + " (" + fr.cut + ")"
		}
	}
	return &vocab.Error{Reason: reason, Err: fmt.Errorf("profile %s: frame cut short after %s: %w", httpTarget(fr.target), after.Round(time.Millisecond), cause)}
}
