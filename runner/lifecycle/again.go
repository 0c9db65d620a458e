package lifecycle

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// A run that takes a profile again (runner/actions' again.go) is a run of
// its own, keyed again/<action>, queued as any other (leases, resume after a
// crash, artifacts, manifest, run page): its alert is the clicked run's, its
// plans that run's playbooks cut to their profile steps (and the scrapes the
// capture's cost reads its "before" from), with no `when`: the click is
// the condition. Its fingerprint is its key, so it is never the alert's
// open run. It opens no thread (its plans are stored without an Open, so
// its replies record nothing); its end replies once in the clicked run's
// thread and frees the action's slot, in the transaction that finishes it.
// A playbook's cooldown and max_concurrent are not asked: the profiling
// guard (budget, lease, cooldown, pause) is what bounds a capture.

// stepKindProfile and stepKindScrape are the step kinds a run again keeps.
const (
	stepKindProfile = "profile"
	stepKindScrape  = "scrape"
)

var _ actions.Againer = (*Runs)(nil)

// guarded is a profile step as the guard sees it (*profile.Profile).
type guarded interface {
	Guarded(alert template.Alert) (vocab.LeaseRequest, error)
}

// ProfileStep is what runID's first profile step asks the guard for; ok
// false when its playbooks have none (or its target does not render).
func (s *Runs) ProfileStep(ctx context.Context, runID string) (vocab.LeaseRequest, bool, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return vocab.LeaseRequest{}, false, err
	}
	for _, sp := range r.plans {
		p, err := s.planner.Rebuild(sp, r.received, s.windowOf(r))
		if err != nil {
			continue // a playbook that no longer builds offers nothing to take again
		}
		for _, st := range p.Steps {
			if g, ok := st.Step.(guarded); ok && st.Kind == stepKindProfile {
				req, err := g.Guarded(r.received)
				return req, err == nil, nil
			}
		}
	}
	return vocab.LeaseRequest{}, false, nil
}

// windowOf is the run's stored window, else the alert's.
func (s *Runs) windowOf(r *runRow) vocab.Window {
	if r.window != nil {
		return *r.window
	}
	return vocab.AlertWindow(r.StartsAt, s.cfg.Lookback, r.CreatedAt.UTC())
}

// Again creates in tx the queued run that takes runID's profile again for
// action actionID, or finds the one an earlier call created.
func (s *Runs) Again(ctx context.Context, tx *sql.Tx, runID, actionID string) (string, error) {
	key := actions.AgainKey(actionID)
	id, err := s.tables.Runs.ByKey(ctx, tx, key)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("runner: run again %s: %w", key, err)
	}
	first, err := s.getRow(ctx, tx, runID)
	if err != nil {
		return "", err
	}
	now, err := s.dbNow(ctx, tx)
	if err != nil {
		return "", fmt.Errorf("runner: run again of %s: clock: %w", runID, err)
	}
	alert, err := json.Marshal(first.received)
	if err != nil {
		return "", fmt.Errorf("runner: run again of %s: %w", runID, err)
	}
	uid, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("runner: run id: %w", err)
	}
	// No instance or model: the seen-before line counts alerts, not clicks.
	row := database.NewRun{ID: uid.String(), Key: key, Fingerprint: key, Alertname: first.Alertname, Alert: string(alert),
		StartsAt: toMS(first.StartsAt), Status: vocab.StatusQueued, CreatedAt: now, QueuedAt: now}
	ins, err := s.tables.Runs.Insert(ctx, tx, []database.NewRun{row})
	if err != nil || len(ins) != 1 {
		return "", fmt.Errorf("runner: run again of %s: insert: %v, %d rows", runID, err, len(ins))
	}
	if err := s.Enqueue(ctx, tx, []RunJob{{RunID: row.ID}}); err != nil {
		return "", fmt.Errorf("runner: run again of %s: %w", runID, err)
	}
	return row.ID, nil
}

// againPlans are a run again's plans: the clicked run's playbooks cut to
// their profile steps, stored (no thread opened) at first execution and
// rebuilt, and cut again, on resume.
func (s *Runs) againPlans(ctx context.Context, r *runRow, actionID string) ([]*playbooks.Plan, vocab.Window, string, error) {
	if r.plans != nil && r.window != nil {
		var plans []*playbooks.Plan
		for _, sp := range r.plans {
			p, err := s.planner.Rebuild(sp, r.received, *r.window)
			if err != nil {
				return nil, *r.window, "", fmt.Errorf("rebuild playbook %s (%s, %.12s): %w", sp.Playbook, sp.File, sp.Digest, err)
			}
			if q := profileOnly(p); q != nil {
				plans = append(plans, q)
			}
		}
		return plans, *r.window, "", nil
	}
	w := vocab.AlertWindow(r.CreatedAt, s.cfg.Lookback, r.CreatedAt.UTC()) // the moment of the click
	act, err := s.tables.Actions.Get(ctx, s.db, actionID)
	if err != nil {
		return nil, w, "", storeError{fmt.Errorf("runner: run again %s: its action: %w", r.ID, err)}
	}
	first, err := s.getRow(ctx, s.db, act.RunID)
	if err != nil {
		return nil, w, "", storeError{err}
	}
	var plans []*playbooks.Plan
	var stored storedPlans
	for _, sp := range first.plans {
		p, err := s.planner.Rebuild(sp, r.received, w)
		if err != nil {
			return nil, w, "", fmt.Errorf("rebuild playbook %s (%s, %.12s): %w", sp.Playbook, sp.File, sp.Digest, err)
		}
		if q := profileOnly(p); q != nil {
			plans, stored = append(plans, q), append(stored, sp)
		}
	}
	if len(plans) == 0 {
		return nil, w, "run " + act.RunID + "'s playbooks have no profile step", nil
	}
	b, err := json.Marshal(stored)
	if err != nil {
		return nil, w, "", fmt.Errorf("runner: encode plans: %w", err)
	}
	owned, err := s.tables.Runs.StorePlans(ctx, s.db, r.ID, s.id, string(b), toMS(w.Start), toMS(w.End))
	if err == nil && !owned {
		err = errors.New("lease lost")
	}
	if err != nil {
		return nil, w, "", storeError{fmt.Errorf("runner: store plans of %s: %w", r.ID, err)}
	}
	r.plans, r.window = stored, &w
	return plans, w, "", nil
}

// profileOnly is p cut to its profile steps and the scrapes before them,
// each without its `when`; nil when p has no profile step.
func profileOnly(p *playbooks.Plan) *playbooks.Plan {
	q := *p
	q.Steps = nil
	found := false
	for _, st := range p.Steps {
		switch st.Kind {
		case stepKindProfile:
			found = true
		case stepKindScrape:
		default:
			continue
		}
		st.When = nil
		q.Steps = append(q.Steps, st)
	}
	if !found {
		return nil
	}
	return &q
}

// againEnded, in the transaction that finishes run r, replies in the
// clicked run's thread when r is a run again, and frees its action's slot.
func (s *Runs) againEnded(ctx context.Context, tx *sql.Tx, r *runRow) error {
	actionID, ok := actions.AgainAction(r.Key)
	if !ok {
		return nil
	}
	act, err := s.tables.Actions.Get(ctx, tx, actionID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // the clicked run is gone (retention): no thread to reply in
	}
	if err != nil {
		return fmt.Errorf("runner: run again %s: its action: %w", r.ID, err)
	}
	if err := s.tables.Actions.Release(ctx, tx, actionID); err != nil {
		return fmt.Errorf("runner: run again %s: free its slot: %w", r.ID, err)
	}
	return s.out.Append(ctx, tx, act.RunID, outbox.ActionDone{ID: actionID})
}

// profilable says whether r's playbooks have a profile step to take again;
// a playbook's answer is kept by digest (its source does not change).
func (s *Runs) profilable(r *runRow) bool {
	for _, sp := range r.plans {
		if v, ok := s.profilables.Load(sp.Digest); ok && sp.Digest != "" {
			if v.(bool) {
				return true
			}
			continue
		}
		p, err := s.planner.Rebuild(sp, r.received, s.windowOf(r))
		has := err == nil && profileOnly(p) != nil
		if err == nil {
			s.profilables.Store(sp.Digest, has)
		}
		if has {
			return true
		}
	}
	return false
}
