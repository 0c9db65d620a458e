package lifecycle

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// A run's verdict history (autocapture_verdicts): every verdict a step
// reached, recorded in the transaction of the thread operation that shows
// it, so the history and the thread never disagree.
//   - preliminary (the PromQL snapshot; keyed by the evidence it read): its
//     row, the run's verdict column and the parent's edit, one transaction;
//   - refined (the triage step): its row, the step and, when it differs from
//     the stored preliminary, the "was X, now Y" reply, in persistStep's;
//   - profiled (a profile step's finding on the plan's latest verdict): its
//     row, the step and the parent's edit, in persistStep's.
//
// What a kill -9 leaves: each transaction is all or none. A preliminary not
// yet recorded is reached again by the resumed attempt over the same
// evidence; one recorded is keyed, so a second records nothing
// (insertVerdict) and the thread never shows it twice. The refined verdict
// is compared with the stored preliminary, not a process's memory, so "was
// X, now Y" is never lost; a profile step not committed runs again.

// refinedKey keys a triage step's refined verdict in its history;
// profiledKey a profile step's refinement.
const (
	refinedKey  = "refined"
	profiledKey = "profiled"
)

// persistPreliminary records a preliminary verdict, the run's verdict
// column and the parent's edit in one transaction, while this process owns
// the run. A verdict recorded before (the same evidence, an earlier attempt)
// records nothing.
func (s *Runs) persistPreliminary(ctx context.Context, runID string, p executor.Preliminary) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	e := runs.VerdictEntry{Kind: runs.VerdictPreliminary, Plan: p.Plan, Step: p.StepID, At: p.At.UTC(),
		Verdict: p.Result.Verdict, Waiting: p.Waiting}
	e.Sources, e.Origins = sourcesOf(p.Result.Findings, p.Sources)
	tx, err := s.db.BeginTx(wctx, nil)
	if err != nil {
		return fmt.Errorf("preliminary verdict of %s: %w", runID, err)
	}
	defer tx.Rollback()
	added, err := s.insertVerdict(wctx, tx, runID, "preliminary/"+p.Key, e)
	if err != nil || !added {
		return err
	}
	if err := s.out.Append(wctx, tx, runID, outbox.VerdictEdit{Preliminary: true}); err != nil {
		return fmt.Errorf("preliminary verdict of %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("preliminary verdict of %s: %w", runID, err)
	}
	s.m.Verdicts.WithLabelValues(runs.VerdictPreliminary, e.Verdict.ID).Inc()
	s.log.Info("Preliminary verdict recorded.", zap.String("run", runID), zap.String("plan", p.Plan),
		zap.String("verdict", e.Verdict.ID), zap.Strings("sources", e.Sources), zap.Strings("waiting", p.Waiting))
	return nil
}

// refined is what recordRefined recorded: whether a row was added, and the
// preliminary verdict it differs from ("" when none or the same).
type refined struct {
	added bool
	was   string
}

// count counts it, once its transaction committed.
func (r refined) count(m *Metrics, now string) {
	if !r.added {
		return
	}
	m.Verdicts.WithLabelValues(runs.VerdictRefined, now).Inc()
	if r.was != "" {
		m.Changed.WithLabelValues(r.was).Inc()
	}
}

// recordRefined records a triage step's verdict in tx (persistStep's) and
// returns the thread operation saying it changed, if it differs from the
// step's latest preliminary verdict.
func (s *Runs) recordRefined(ctx context.Context, tx *sql.Tx, runID string, rec executor.StepRecord) ([]outbox.Op, refined, error) {
	e := runs.VerdictEntry{Kind: runs.VerdictRefined, Plan: rec.Plan, Step: rec.ID, At: rec.FinishedAt.UTC(), Verdict: rec.Verdict}
	e.Sources, e.Origins = sourcesOf(rec.Findings, nil)
	prev, err := s.latestVerdict(ctx, tx, runID, rec.Plan, rec.ID)
	if err != nil {
		return nil, refined{}, err
	}
	if prev != nil && prev.Kind == runs.VerdictPreliminary && !notify.SameVerdict(prev.Verdict, rec.Verdict) {
		e.Was, e.Change = prev.Verdict.ID, notify.VerdictChange(prev.Verdict, rec.Verdict)
	}
	added, err := s.insertVerdict(ctx, tx, runID, refinedKey, e)
	if err != nil || !added || e.Change == "" {
		return nil, refined{added: added}, err
	}
	s.log.Info("The refined verdict differs from the preliminary one.", zap.String("run", runID),
		zap.String("plan", rec.Plan), zap.String("change", e.Change))
	return []outbox.Op{outbox.VerdictChanged{Plan: rec.Plan, Step: rec.ID}},
		refined{added: true, was: e.Was}, nil
}

// recordProfiled records, in tx (persistStep's), the run's latest verdict of
// the step's plan refined by the profile's finding, and returns the parent's
// edit showing it and the verdict's id to count once tx commits; nothing
// when no verdict was reached before the profile.
func (s *Runs) recordProfiled(ctx context.Context, tx *sql.Tx, runID string, rec executor.StepRecord) ([]outbox.Op, string, error) {
	history, err := s.loadVerdicts(ctx, tx, runID)
	if err != nil {
		return nil, "", err
	}
	var latest, ofPlan *vocab.Verdict
	for _, e := range history {
		if e.Verdict == nil || e.Kind == runs.VerdictProfiled {
			continue
		}
		latest = e.Verdict
		if e.Plan == rec.Plan {
			ofPlan = e.Verdict
		}
	}
	base := cmp.Or(ofPlan, latest) // the plan's latest, else the run's
	if base == nil {
		return nil, "", nil
	}
	e := runs.VerdictEntry{Kind: runs.VerdictProfiled, Plan: rec.Plan, Step: rec.ID, At: rec.FinishedAt.UTC(),
		Verdict: vocab.WithProfile(base, rec.Profile), Sources: []string{rec.ID}}
	added, err := s.insertVerdict(ctx, tx, runID, profiledKey, e)
	if err != nil || !added {
		return nil, "", err
	}
	return []outbox.Op{outbox.VerdictEdit{Profiled: rec.Plan + "/" + rec.ID}}, e.Verdict.ID, nil
}

// countProfiled counts a profiled verdict (id) once its transaction
// committed; "" counts nothing.
func (s *Runs) countProfiled(id string) {
	if id != "" {
		s.m.Verdicts.WithLabelValues(runs.VerdictProfiled, id).Inc()
	}
}

// insertVerdict adds e to the run's history under key, numbered after the
// run's last, and makes it the run's verdict; false when the key was
// recorded before (nothing is written then). It fails when this process no
// longer owns the run.
func (s *Runs) insertVerdict(ctx context.Context, tx *sql.Tx, runID, key string, e runs.VerdictEntry) (bool, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("verdict %s of %s: encode: %w", key, runID, err)
	}
	v, err := json.Marshal(e.Verdict)
	if err != nil {
		return false, fmt.Errorf("verdict %s of %s: encode: %w", key, runID, err)
	}
	// The owner check first: it locks the run's row, so the numbering below
	// cannot race another writer of the run.
	owned, err := s.tables.Runs.LockOwned(ctx, tx, runID, s.id)
	if err != nil {
		return false, fmt.Errorf("verdict %s of %s: %w", key, runID, err)
	}
	if !owned {
		return false, fmt.Errorf("verdict %s of %s: lease lost", key, runID)
	}
	added, err := s.tables.Verdicts.Add(ctx, tx, database.Verdict{RunID: runID, Plan: e.Plan, Step: e.Step, Key: key,
		Kind: e.Kind, At: toMS(e.At), Record: string(b)})
	if err != nil {
		return false, fmt.Errorf("verdict %s of %s: %w", key, runID, err)
	}
	if !added {
		return false, nil
	}
	if err := s.tables.Runs.SetVerdict(ctx, tx, runID, string(v)); err != nil {
		return false, fmt.Errorf("verdict %s of %s: %w", key, runID, err)
	}
	return true, nil
}

// latestVerdict is the step's last recorded verdict, nil without one.
func (s *Runs) latestVerdict(ctx context.Context, q querier, runID, plan, step string) (*runs.VerdictEntry, error) {
	raw, ok, err := s.tables.Verdicts.Latest(ctx, q, runID, plan, step)
	if err != nil {
		return nil, fmt.Errorf("verdicts of %s: %w", runID, err)
	}
	if !ok {
		return nil, nil
	}
	var e runs.VerdictEntry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return nil, fmt.Errorf("verdicts of %s: decode: %w", runID, err)
	}
	return &e, nil
}

// loadVerdicts returns the run's verdict history in the order recorded.
func (s *Runs) loadVerdicts(ctx context.Context, q reader, id string) ([]runs.VerdictEntry, error) {
	records, err := s.tables.Verdicts.List(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("runner: verdicts of run %s: %w", id, err)
	}
	out := []runs.VerdictEntry{}
	for _, raw := range records {
		var e runs.VerdictEntry
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, fmt.Errorf("runner: verdicts of run %s: decode: %w", id, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// changeReply is the content of the reply saying the refined verdict
// differs: read from the refined entry at delivery.
func (s *Runs) changeReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error) {
	raw, err := s.tables.Verdicts.Get(ctx, s.db, runID, plan, step, refinedKey)
	if err != nil {
		return notify.StepReport{}, fmt.Errorf("reply %s: read verdict: %w", key, err)
	}
	var e runs.VerdictEntry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return notify.StepReport{}, fmt.Errorf("reply %s: decode verdict: %w", key, err)
	}
	return notify.StepReport{RunID: runID, Plan: plan, StepID: step, Kind: "triage", Tier: vocab.TierTriage,
		Status: vocab.StatusSucceeded, Summary: e.Change, Change: e.Change, Verdict: e.Verdict, Key: key, Retry: retry}, nil
}

// sourcesOf reads the steps and signal origins a triage result names in its
// findings (as the step wrote them, or as JSON decoded them); fallback when
// it names none.
func sourcesOf(findings map[string]any, fallback []string) ([]string, map[string]vocab.Origin) {
	var f struct {
		Sources []string                `json:"sources"`
		Origins map[string]vocab.Origin `json:"origins"`
	}
	if b, err := json.Marshal(map[string]any{"sources": findings["sources"], "origins": findings["origins"]}); err == nil {
		_ = json.Unmarshal(b, &f) // a step that wrote something else names none
	}
	if len(f.Sources) == 0 {
		f.Sources = fallback
	}
	if f.Sources == nil {
		f.Sources = []string{}
	}
	return f.Sources, f.Origins
}
