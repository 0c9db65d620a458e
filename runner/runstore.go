package runner

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/executor"
)

// finish records the run's end (only while this process owns it), then closes
// the thread. Writes use a context that outlives a cancelled run.
func (s *Service) finish(ctx context.Context, r *runRow, t notify.Thread, status, reason string, v *capture.Verdict) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var verdict any
	if v != nil {
		b, _ := json.Marshal(v)
		verdict = string(b)
	}
	var resolved sql.NullInt64
	var tookMS int64 // from the first start, on the database's clock
	err := s.db.QueryRowContext(wctx, s.dialect.sql(`UPDATE autocapture_runs SET status = $1, reason = $2,
		finished_at = {now}, verdict = $3, owner = NULL, lease_until = NULL WHERE id = $4 AND owner = $5
		RETURNING resolved_at, finished_at - COALESCE(started_at, created_at)`),
		status, reason, verdict, r.ID, s.id).Scan(&resolved, &tookMS)
	if errors.Is(err, sql.ErrNoRows) {
		s.log.Warn("Run finished here but its lease was taken over; result not recorded.", zap.String("run", r.ID))
		return nil
	}
	if err != nil {
		return fmt.Errorf("runner: finish run %s: %w", r.ID, err)
	}
	took := time.Duration(tookMS) * time.Millisecond
	s.m.finished.WithLabelValues(status).Inc()
	s.m.duration.WithLabelValues(status).Observe(took.Seconds())
	s.log.Info("Run finished.", zap.String("run", r.ID), zap.String("status", status), zap.String("reason", reason))
	if t == (notify.Thread{}) {
		return nil // no thread was opened (skipped, cancelled before start): nothing to close
	}
	err = s.o.Notifier.Close(wctx, t, notify.Summary{RunID: r.ID, Status: status, Reason: reason, Verdict: v,
		ResolvedAt: optTime(resolved), Duration: took})
	s.logNotify("close", r.ID, err)
	return nil
}

// unclaim hands a run back to the queue without counting the attempt (it waits
// for a playbook slot) and returns ret for River.
func (s *Service) unclaim(h *handle, ret error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `UPDATE autocapture_runs SET owner = NULL, lease_until = NULL, status = $1,
		attempts = attempts - 1 WHERE id = $2 AND owner = $3`, StatusQueued, h.id, s.id); err != nil {
		return fmt.Errorf("runner: unclaim run %s: %w", h.id, err)
	}
	return ret
}

// cooldown returns why plan p must not run now: another run of the same
// cooldown key started inside the cooldown.
func (s *Service) cooldown(ctx context.Context, q querier, runID string, p *playbooks.Plan) (string, error) {
	if p.Cooldown <= 0 || p.CooldownKey == "" {
		return "", nil
	}
	var other string
	var at int64
	err := q.QueryRowContext(ctx, `SELECT run_id, created_at FROM autocapture_run_playbooks
		WHERE cooldown_key = $1 AND created_at >= $2 AND run_id <> $3 ORDER BY created_at DESC LIMIT 1`,
		p.CooldownKey, toMS(s.now().Add(-p.Cooldown)), runID).Scan(&other, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("runner: cooldown of %s: %w", p.Playbook, err)
	}
	return fmt.Sprintf("cooldown: playbook %s ran for run %s at %s (cooldown %s)",
		p.Playbook, other, fromMS(at).Format(time.RFC3339), p.Cooldown), nil
}

// playbookSlot returns errWait when p's max_concurrent runs already execute.
func (s *Service) playbookSlot(ctx context.Context, q querier, runID string, p *playbooks.Plan) error {
	if p.MaxConcurrent <= 0 {
		return nil
	}
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM autocapture_run_playbooks rp
		JOIN autocapture_runs r ON r.id = rp.run_id
		WHERE rp.playbook = $1 AND r.finished_at IS NULL AND r.owner IS NOT NULL AND r.id <> $2`,
		p.Playbook, runID).Scan(&n)
	if err != nil {
		return fmt.Errorf("runner: max_concurrent of %s: %w", p.Playbook, err)
	}
	if n >= p.MaxConcurrent {
		return fmt.Errorf("%w: %s has %d running (max %d)", errWait, p.Playbook, n, p.MaxConcurrent)
	}
	return nil
}

// storePlans checks each plan's cooldown and max_concurrent and persists the
// plans that may run (identity and window, so a resume rebuilds exactly these;
// one row per playbook for later cooldowns), all in one transaction: SQLite's
// BEGIN IMMEDIATE and a PostgreSQL advisory lock per playbook make the
// check-then-insert atomic across workers and replicas. It returns the kept
// plans and why the others were skipped; errWait when a playbook has no slot.
func (s *Service) storePlans(ctx context.Context, r *runRow, all []*playbooks.Plan, w capture.Window) ([]*playbooks.Plan, []string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, storeError{fmt.Errorf("runner: store plans: %w", err)}
	}
	defer tx.Rollback()
	var plans []*playbooks.Plan
	var skipped []string
	for _, p := range all {
		if err := s.lockPlaybook(ctx, tx, p); err != nil {
			return nil, nil, storeError{err}
		}
		why, err := s.cooldown(ctx, tx, r.ID, p)
		if err != nil {
			return nil, nil, storeError{err}
		}
		if why != "" {
			skipped = append(skipped, why)
			continue
		}
		if err := s.playbookSlot(ctx, tx, r.ID, p); err != nil {
			if !errors.Is(err, errWait) {
				err = storeError{err}
			}
			return nil, nil, err
		}
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return nil, skipped, nil
	}
	if err := s.insertPlans(ctx, tx, r, plans, w); err != nil {
		return nil, nil, storeError{err}
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, storeError{fmt.Errorf("runner: store plans of %s: %w", r.ID, err)}
	}
	return plans, skipped, nil
}

// lockPlaybook serializes plan checks per playbook on PostgreSQL (SQLite's
// write transactions are serial already).
func (s *Service) lockPlaybook(ctx context.Context, tx *sql.Tx, p *playbooks.Plan) error {
	if s.dialect != dialectPostgres || (p.MaxConcurrent <= 0 && p.Cooldown <= 0) {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte("autocapture/playbook/" + p.Playbook))
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
		return fmt.Errorf("runner: lock playbook %s: %w", p.Playbook, err)
	}
	return nil
}

func (s *Service) insertPlans(ctx context.Context, tx *sql.Tx, r *runRow, plans []*playbooks.Plan, w capture.Window) error {
	stored := make(storedPlans, len(plans))
	for i, p := range plans {
		stored[i] = p.Stored()
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("runner: encode plans: %w", err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE autocapture_runs SET plans = $1, window_start = $2, window_end = $3
		WHERE id = $4 AND owner = $5`, string(b), toMS(w.Start), toMS(w.End), r.ID, s.id)
	if err != nil {
		return fmt.Errorf("runner: store plans of %s: %w", r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("runner: store plans of %s: lease lost", r.ID)
	}
	for _, p := range plans {
		if _, err := tx.ExecContext(ctx, `INSERT INTO autocapture_run_playbooks (run_id, playbook, cooldown_key, created_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, r.ID, p.Playbook, p.CooldownKey, toMS(r.CreatedAt)); err != nil {
			return fmt.Errorf("runner: store plans of %s: %w", r.ID, err)
		}
	}
	r.plans, r.window = stored, &w
	return nil
}

// doneSteps loads the steps persisted by earlier attempts, by plan and step id.
func (s *Service) doneSteps(ctx context.Context, runID string) (map[string]map[string]executor.StepRecord, error) {
	recs, err := s.loadSteps(ctx, runID)
	if err != nil {
		return nil, storeError{err}
	}
	out := map[string]map[string]executor.StepRecord{}
	for _, r := range recs {
		if out[r.Plan] == nil {
			out[r.Plan] = map[string]executor.StepRecord{}
		}
		out[r.Plan][r.ID] = r
	}
	return out, nil
}
