package profiling

import (
	"context"
	"fmt"
	"time"

	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/vocab"
)

// The Plane remembers each target's last stall for the profile step's
// cost.max_last_stall, on the start rows every replica shares.
var _ profile.StallMemory = (*Plane)(nil)

// RecordStall writes how long the stop of req's capture kept its target from
// serving, on that step's latest start of the target.
func (pl *Plane) RecordStall(ctx context.Context, req vocab.LeaseRequest, stall time.Duration) error {
	target := normTarget(req.Target)
	ok, err := pl.tables.ProfileStarts.SetStall(ctx, pl.db, req.RunID, req.Plan, req.StepID, target, stall.Milliseconds())
	if err != nil {
		return fmt.Errorf("runner: profile stall %s: %w", target, err)
	}
	if !ok {
		return fmt.Errorf("runner: profile stall %s: run %s's step %s has no start recorded there", target, req.RunID, req.StepID)
	}
	return nil
}

// LastStall is the stall of target's latest measured capture and when that
// capture started; ok is false when none was measured.
func (pl *Plane) LastStall(ctx context.Context, target string) (time.Duration, time.Time, bool, error) {
	ms, at, ok, err := pl.tables.ProfileStarts.LastStall(ctx, pl.db, normTarget(target))
	if err != nil || !ok {
		return 0, time.Time{}, false, err
	}
	return time.Duration(ms) * time.Millisecond, fromMS(at), true, nil
}
