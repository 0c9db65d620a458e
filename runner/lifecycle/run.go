package lifecycle

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// storedPlans is what a run persists about its plans at first execution.
type storedPlans []playbooks.StoredPlan

// runRow is a run as stored, with what only the lifecycle reads.
type runRow struct {
	runs.Run
	alert      template.Alert // labels and annotations clipped (untrusted.Clip)
	received   template.Alert // the alert as received, whole: what the steps and plans read, and the manifest
	generation int
	owner      sql.NullString
	leaseUntil sql.NullInt64
	plans      storedPlans
	window     *vocab.Window
}

type scanner interface{ Scan(dest ...any) error }

// decodeRun reads a run's stored row (database.Run).
func decodeRun(raw database.Run) (*runRow, error) {
	var r runRow
	r.ID, r.Key, r.Fingerprint, r.Alertname, r.Status, r.Reason = raw.ID, raw.Key, raw.Fingerprint, raw.Alertname, raw.Status, raw.Reason
	r.Attempts, r.Resumed, r.generation, r.owner, r.leaseUntil = raw.Attempts, raw.Resumed, raw.Generation, raw.Owner, raw.LeaseUntil
	alertJSON, startsAt, createdAt := raw.Alert, raw.StartsAt, raw.CreatedAt
	resolved, cancelReq, started, finished := raw.ResolvedAt, raw.CancelRequestedAt, raw.StartedAt, raw.FinishedAt
	plans, verdict, manifest := raw.Plans, raw.Verdict, raw.ManifestKey
	wStart, wEnd := raw.WindowStart, raw.WindowEnd
	if err := json.Unmarshal([]byte(alertJSON), &r.received); err != nil {
		return nil, corruptError{fmt.Errorf("run %s: decode alert: %w", r.ID, err)}
	}
	// Every surface and log reads the run from here: bounded once.
	r.alert = r.received
	r.alert.Labels, r.alert.Annotations = untrusted.ClipKV(r.alert.Labels), untrusted.ClipKV(r.alert.Annotations)
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

// corruptError is a run row that cannot be decoded: retrying cannot help, so the
// run fails with it instead of being released and resumed again and again.
type corruptError struct{ error }

func (e corruptError) Unwrap() error { return e.error }
