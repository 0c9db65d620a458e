package runner

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Run statuses: the one list used by the store, the API, metrics and threads.
// Resolution is separate (runs.Run.ResolvedAt).
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusSucceeded = executor.Succeeded
	StatusPartial   = executor.Partial
	StatusFailed    = executor.Failed
	StatusSkipped   = executor.Skipped
	StatusCancelled = executor.Cancelled
)

// Statuses lists every run status.
var Statuses = []string{StatusQueued, StatusRunning, StatusSucceeded, StatusPartial, StatusFailed, StatusSkipped, StatusCancelled}

// storedPlans is what a run persists about its plans at first execution.
type storedPlans []playbooks.StoredPlan

// runRow is a run as stored, with what only the runner reads.
type runRow struct {
	runs.Run
	alert      template.Alert
	generation int
	owner      sql.NullString
	leaseUntil sql.NullInt64
	plans      storedPlans
	window     *vocab.Window
}

const runColumns = `id, run_key, fingerprint, alertname, alert, starts_at, status, reason, resolved_at,
	cancel_requested_at, created_at, started_at, finished_at, attempts, resumed, generation, owner,
	lease_until, plans, window_start, window_end, thread, verdict, manifest_key`

type scanner interface{ Scan(dest ...any) error }

// scanRun reads one row selected with runColumns.
func scanRun(sc scanner) (*runRow, error) {
	var (
		r                                      runRow
		alertJSON                              string
		startsAt, createdAt                    int64
		resolved, cancelReq, started, finished sql.NullInt64
		plans, verdict, manifest               sql.NullString
		thread                                 sql.NullString // before the outbox (migration 5); unused
		wStart, wEnd                           sql.NullInt64
	)
	err := sc.Scan(&r.ID, &r.Key, &r.Fingerprint, &r.Alertname, &alertJSON, &startsAt, &r.Status, &r.Reason,
		&resolved, &cancelReq, &createdAt, &started, &finished, &r.Attempts, &r.Resumed, &r.generation,
		&r.owner, &r.leaseUntil, &plans, &wStart, &wEnd, &thread, &verdict, &manifest)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(alertJSON), &r.alert); err != nil {
		return nil, corruptError{fmt.Errorf("run %s: decode alert: %w", r.ID, err)}
	}
	r.Labels, r.Annotations = r.alert.Labels, r.alert.Annotations
	r.StartsAt, r.CreatedAt = fromMS(startsAt), fromMS(createdAt)
	r.ResolvedAt, r.CancelRequestedAt = optTime(resolved), optTime(cancelReq)
	r.StartedAt, r.FinishedAt = optTime(started), optTime(finished)
	r.Manifest = manifest.String
	if plans.Valid {
		if err := json.Unmarshal([]byte(plans.String), &r.plans); err != nil {
			return nil, corruptError{fmt.Errorf("run %s: decode plans: %w", r.ID, err)}
		}
		for _, p := range r.plans {
			r.Playbooks = append(r.Playbooks, runs.PlaybookRef{Name: p.Playbook, File: p.File, Digest: p.Digest})
		}
	}
	if wStart.Valid && wEnd.Valid {
		r.window = &vocab.Window{Start: fromMS(wStart.Int64), End: fromMS(wEnd.Int64)}
	}
	if verdict.Valid {
		r.Verdict = &vocab.Verdict{}
		if err := json.Unmarshal([]byte(verdict.String), r.Verdict); err != nil {
			return nil, corruptError{fmt.Errorf("run %s: decode verdict: %w", r.ID, err)}
		}
	}
	if r.Playbooks == nil {
		r.Playbooks = []runs.PlaybookRef{}
	}
	return &r, nil
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

// finished says whether a status is final.
func finished(status string) bool {
	switch status {
	case StatusQueued, StatusRunning:
		return false
	}
	return true
}

// corruptError is a run row that cannot be decoded: retrying cannot help, so the
// run fails with it instead of being released and resumed again and again.
type corruptError struct{ error }

func (e corruptError) Unwrap() error { return e.error }
