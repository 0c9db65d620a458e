package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"
	"github.com/riverqueue/river"
	"go.uber.org/zap"
)

// Accept records a group of validated alerts in ONE transaction: a firing alert
// joins the unresolved run of its fingerprint or starts a new run (keyed
// fingerprint + startsAt) with its job; a resolved alert sets its run's
// resolved_at. Any error means nothing was committed: answer 503 so
// Alertmanager retries.
func (s *Service) Accept(ctx context.Context, alerts []template.Alert) ([]Accepted, error) {
	if s.dead.Load() {
		return nil, fmt.Errorf("runner: accept: service abandoned")
	}
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("runner: accept: begin: %w", err)
	}
	defer tx.Rollback()
	out := make([]Accepted, 0, len(alerts))
	var jobs []river.InsertManyParams
	for _, a := range alerts {
		var acc Accepted
		if a.Status == "resolved" {
			acc, err = s.acceptResolved(ctx, tx, a, now)
		} else {
			acc, err = s.acceptFiring(ctx, tx, a, now)
		}
		if err != nil {
			return nil, fmt.Errorf("runner: accept alert %s: %w", a.Fingerprint, err)
		}
		if acc.Outcome == OutcomeAccepted {
			jobs = append(jobs, river.InsertManyParams{Args: runArgs{RunID: acc.RunID}})
		}
		out = append(out, acc)
	}
	if len(jobs) > 0 {
		if _, err := s.client.InsertManyTx(ctx, tx, jobs); err != nil {
			return nil, fmt.Errorf("runner: accept: enqueue %d runs: %w", len(jobs), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("runner: accept: commit: %w", err)
	}
	for _, acc := range out {
		switch acc.Outcome {
		case OutcomeResolved:
			s.signalResolved(acc.RunID)
		case OutcomeResolvedUnknown:
			s.log.Info("Resolved alert has no known run; nothing to do.", zap.String("fingerprint", acc.Fingerprint))
		}
	}
	return out, nil
}

// runKey identifies a firing episode: fingerprint and start.
func runKey(a template.Alert) string {
	return a.Fingerprint + "@" + a.StartsAt.UTC().Format(time.RFC3339Nano)
}

// acceptFiring finds the unresolved run of the alert's fingerprint, or inserts a
// new one. The database decides races: the run key is unique, and so is the
// fingerprint among unresolved runs.
func (s *Service) acceptFiring(ctx context.Context, tx *sql.Tx, a template.Alert, now time.Time) (Accepted, error) {
	acc := Accepted{Fingerprint: a.Fingerprint, Outcome: OutcomeDeduplicated}
	if id, err := s.existingRun(ctx, tx, a); err != nil || id != "" {
		acc.RunID = id
		return acc, err
	}
	alertJSON, err := json.Marshal(a)
	if err != nil {
		return acc, fmt.Errorf("encode alert: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return acc, fmt.Errorf("run id: %w", err)
	}
	var got string
	err = tx.QueryRowContext(ctx, `INSERT INTO autocapture_runs
		(id, run_key, fingerprint, alertname, alert, starts_at, status, created_at, queued_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
		ON CONFLICT DO NOTHING RETURNING id`,
		id.String(), runKey(a), a.Fingerprint, a.Labels["alertname"], string(alertJSON),
		toMS(a.StartsAt), StatusQueued, toMS(now)).Scan(&got)
	switch {
	case err == nil:
		acc.RunID, acc.Outcome = got, OutcomeAccepted
		return acc, nil
	case !errors.Is(err, sql.ErrNoRows):
		return acc, fmt.Errorf("insert run: %w", err)
	}
	// Another delivery of the same firing committed first.
	id2, err := s.existingRun(ctx, tx, a)
	if err == nil && id2 == "" {
		err = fmt.Errorf("insert run: conflict, but no run found for key %s", runKey(a))
	}
	acc.RunID = id2
	return acc, err
}

// existingRun returns the fingerprint's unresolved run, else the run of this
// exact episode (a late repeat of a resolved firing), else "".
func (s *Service) existingRun(ctx context.Context, tx *sql.Tx, a template.Alert) (string, error) {
	var id string
	err := tx.QueryRowContext(ctx, `SELECT id FROM autocapture_runs WHERE fingerprint = $1 AND resolved_at IS NULL`,
		a.Fingerprint).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		err = tx.QueryRowContext(ctx, `SELECT id FROM autocapture_runs WHERE run_key = $1`, runKey(a)).Scan(&id)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find run: %w", err)
	}
	return id, nil
}

// acceptResolved sets resolved_at on the fingerprint's unresolved run. A repeat
// of a resolution already recorded answers with that run; with no run at all the
// alert is counted and logged, nothing more.
func (s *Service) acceptResolved(ctx context.Context, tx *sql.Tx, a template.Alert, now time.Time) (Accepted, error) {
	acc := Accepted{Fingerprint: a.Fingerprint, Outcome: OutcomeResolved}
	at := a.EndsAt
	if at.IsZero() || at.After(now) {
		at = now
	}
	err := tx.QueryRowContext(ctx, `UPDATE autocapture_runs SET resolved_at = $1
		WHERE fingerprint = $2 AND resolved_at IS NULL RETURNING id`, toMS(at), a.Fingerprint).Scan(&acc.RunID)
	if err == nil {
		return acc, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return acc, fmt.Errorf("resolve run: %w", err)
	}
	err = tx.QueryRowContext(ctx, `SELECT id FROM autocapture_runs WHERE run_key = $1
		OR (fingerprint = $2 AND resolved_at >= $3) ORDER BY created_at DESC LIMIT 1`,
		runKey(a), a.Fingerprint, toMS(a.StartsAt)).Scan(&acc.RunID)
	if errors.Is(err, sql.ErrNoRows) {
		return Accepted{Fingerprint: a.Fingerprint, Outcome: OutcomeResolvedUnknown}, nil
	}
	if err != nil {
		return acc, fmt.Errorf("find resolved run: %w", err)
	}
	return acc, nil
}

// signalResolved tells a run this process executes that its alert resolved;
// other processes learn it from the row at their next heartbeat.
func (s *Service) signalResolved(id string) {
	s.mu.Lock()
	h := s.active[id]
	s.mu.Unlock()
	if h != nil {
		h.resolve()
	}
}
