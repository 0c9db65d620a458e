package profiling

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// leaseRow is one row of autocapture_profile_leases (times: database ms).
type leaseRow struct {
	target, runID, plan, step, owner, token, state string
	acquired, until                                int64
	since, deadline, stopAt                        sql.NullInt64
	stopBy                                         string
	attempts                                       int
	saved                                          sql.NullString
	reason                                         string
}

// leaseOf is a lease's row as the runner reads it, or err.
func leaseOf(l database.ProfileLease, err error) (*leaseRow, error) {
	if err != nil {
		return nil, err
	}
	return &leaseRow{target: l.Target, runID: l.RunID, plan: l.Plan, step: l.Step, owner: l.Owner, token: l.Token,
		state: l.State, acquired: l.Acquired, until: l.Until, since: l.Since, deadline: l.Deadline, stopAt: l.StopAt,
		stopBy: l.StopBy, attempts: l.Attempts, saved: l.Saved, reason: l.Reason}, nil
}

// leasesOf is leaseOf for each row.
func leasesOf(ls []database.ProfileLease, err error) ([]*leaseRow, error) {
	if err != nil {
		return nil, err
	}
	out := make([]*leaseRow, len(ls))
	for i, l := range ls {
		out[i], _ = leaseOf(l, nil)
	}
	return out, nil
}

// sameStep says whether req is the step that holds the row (a resumed one).
func (r *leaseRow) sameStep(req vocab.LeaseRequest) bool {
	return r.runID == req.RunID && r.plan == req.Plan && r.step == req.StepID
}

// takeable: the owner is gone and no recording can be running.
func (r *leaseRow) takeable(now int64) bool {
	return (r.state == vocab.LeaseHeld || r.state == vocab.LeaseStopped) && r.until < now
}

// busyDetail says who holds the target, for a refusal.
func (r *leaseRow) busyDetail() string {
	switch r.state {
	case vocab.LeaseStopFailed:
		return fmt.Sprintf("the stop of run %s's capture on %s failed (%s); the target stays leased until a later stop "+
			"is answered (the sweeper retries) or an operator clears it (DELETE /api/v1/profiling/leases?target=%s)",
			r.runID, r.target, r.reason, r.target)
	case vocab.LeaseStopped:
		if r.owner == "" {
			return fmt.Sprintf("run %s's capture on %s was stopped by the sweeper after its owner died; the target stays leased "+
				"until %s (profiling.collect_window) so that run %s's resumed attempt collects its files "+
				"(or an operator clears it: DELETE /api/v1/profiling/leases?target=%s)",
				r.runID, r.target, fmtMS(r.until), r.runID, r.target)
		}
	case vocab.LeaseRecording, vocab.LeaseStopping:
		return fmt.Sprintf("run %s is %s on %s since %s, stop by %s", r.runID, r.state, r.target,
			fmtMS(r.since.Int64), fmtMS(r.deadline.Int64))
	}
	return fmt.Sprintf("run %s holds %s (%s)", r.runID, r.target, r.state)
}

// recording is what the row made durable, for a resumed step.
func (r *leaseRow) recording() vocab.Recording {
	rec := vocab.Recording{Target: r.target, State: r.state}
	if r.since.Valid {
		rec.Since = fromMS(r.since.Int64)
	}
	if r.deadline.Valid {
		rec.Deadline = fromMS(r.deadline.Int64)
	}
	if r.saved.Valid && r.saved.String != "" {
		rec.Saved = json.RawMessage(r.saved.String)
	}
	return rec
}

// api is the row as the API shows it.
func (r *leaseRow) api() runs.ProfileLease {
	return runs.ProfileLease{Target: r.target, RunID: r.runID, Plan: r.plan, Step: r.step, Owner: r.owner,
		State: r.state, AcquiredAt: fromMS(r.acquired), Since: optTime(r.since), Deadline: optTime(r.deadline),
		LeaseUntil: fromMS(r.until), StopRequestedAt: optTime(r.stopAt), StopRequestedBy: r.stopBy,
		StopAttempts: r.attempts, Reason: r.reason}
}

// maxEventDetail bounds one event's detail (a stop's error can be long).
const maxEventDetail = 500

// profileEvent appends to a capture's audit trail (GET /api/v1/runs/{id}/profile).
func (pl *Plane) profileEvent(ctx context.Context, q database.Querier, runID, target, actor, event, detail string) error {
	if len(detail) > maxEventDetail {
		detail = strings.ToValidUTF8(detail[:maxEventDetail], "") + "…"
	}
	if err := pl.tables.ProfileEvents.Add(ctx, q, runID, target, actor, event, detail); err != nil {
		return fmt.Errorf("runner: profile event %s of run %s: %w", event, runID, err)
	}
	return nil
}

func toMS(t time.Time) int64 { return t.UnixMilli() }

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func optTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}
