package lifecycle

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Accept records a group of validated alerts in ONE transaction: a firing alert
// joins the unresolved run of its fingerprint or starts a new run (keyed
// fingerprint + startsAt) with its job; a resolved alert sets its run's
// resolved_at. Any error means nothing was committed: answer 503 so
// Alertmanager retries.
func (s *Runs) Accept(ctx context.Context, alerts []template.Alert) ([]runs.Accepted, error) {
	for attempt := 1; ; attempt++ {
		out, err := s.acceptOnce(ctx, alerts)
		// A fleet member's accept numbers its lead's thread while the lead's
		// own work may hold it: PostgreSQL can abort one of the two as a
		// deadlock, and the aborted one kept nothing, so it runs again.
		if err == nil || attempt == acceptAttempts || !database.Retryable(err) {
			return out, err
		}
		s.log.Warn("Accepting alerts was aborted by the database; accepting them again.", zap.Int("attempt", attempt), zap.Error(err))
	}
}

// acceptAttempts bounds Accept's runs of one group of alerts.
const acceptAttempts = 3

// acceptOnce is one transaction of Accept.
func (s *Runs) acceptOnce(ctx context.Context, alerts []template.Alert) ([]runs.Accepted, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("runner: accept: begin: %w", err)
	}
	defer tx.Rollback()
	// created_at and queued_at are compared by other replicas (the reaper's
	// stranded check, the list's order): the database's clock.
	nowMS, err := s.dbNow(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("runner: accept: clock: %w", err)
	}
	now := fromMS(nowMS)
	out := make([]runs.Accepted, len(alerts))
	// Resolutions first: a group holding both the end of one episode and the
	// start of the next must close the old run before opening the new one.
	// Rows are touched in one global order (fingerprint, then run key), so two
	// groups holding the same alerts in different orders (two Alertmanagers,
	// retries) wait for each other on PostgreSQL instead of deadlocking.
	order := make([]int, len(alerts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := alerts[order[x]], alerts[order[y]]
		if a.Fingerprint != b.Fingerprint {
			return a.Fingerprint < b.Fingerprint
		}
		return runKey(a) < runKey(b)
	})
	var firing []int
	var resolved []string // runs resolved now: their threads say so (recordResolved)
	for _, i := range order {
		a := alerts[i]
		if a.Status != "resolved" {
			firing = append(firing, i)
			continue
		}
		var fresh bool
		if out[i], fresh, err = s.acceptResolved(ctx, tx, a, now); err != nil {
			return nil, fmt.Errorf("runner: accept alert %s: %w", a.Fingerprint, err)
		}
		if fresh {
			resolved = append(resolved, out[i].RunID)
		}
	}
	// The thread says so, whoever executes the run and even after it
	// finished: the update commits with the resolution.
	if err := s.out.AppendResolved(ctx, tx, resolved); err != nil {
		return nil, fmt.Errorf("runner: accept: %w", err)
	}
	created, err := s.insertRuns(ctx, tx, alerts, firing, now)
	if err != nil {
		return nil, fmt.Errorf("runner: accept: %w", err)
	}
	if err := s.grp.Assign(ctx, tx, alerts, created, now); err != nil { // storms and fleets (runner/grouping)
		return nil, fmt.Errorf("runner: accept: %w", err)
	}
	var jobs []RunJob
	for _, i := range firing {
		a := alerts[i]
		if id, ok := created[i]; ok {
			out[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: id, Outcome: runs.OutcomeAccepted}
			jobs = append(jobs, RunJob{RunID: id})
			continue
		}
		// The firing already has a run (an earlier delivery, another replica, an
		// unresolved run of this fingerprint with another startsAt, or the same
		// alert twice in this group): the unique indexes said so.
		id, err := s.existingRun(ctx, tx, a)
		if err == nil && id == "" {
			err = fmt.Errorf("insert run: conflict, but no run found for key %s", runKey(a))
		}
		var again map[int]string
		if err == nil {
			again, err = s.replaceStaleRun(ctx, tx, id, alerts, i, now)
		}
		if err != nil {
			return nil, fmt.Errorf("runner: accept alert %s: %w", a.Fingerprint, err)
		}
		if newID, ok := again[i]; ok {
			out[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: newID, Outcome: runs.OutcomeAccepted}
			jobs = append(jobs, RunJob{RunID: newID})
			continue
		}
		out[i] = runs.Accepted{Fingerprint: a.Fingerprint, RunID: id, Outcome: runs.OutcomeDeduplicated}
	}
	if err := s.Enqueue(ctx, tx, jobs); err != nil {
		return nil, fmt.Errorf("runner: accept: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("runner: accept: commit: %w", err)
	}
	for _, acc := range out {
		switch acc.Outcome {
		case runs.OutcomeResolved:
			s.signalResolved(acc.RunID)
		case runs.OutcomeResolvedUnknown:
			s.log.Info("Resolved alert has no known run; nothing to do.", zap.String("fingerprint", acc.Fingerprint))
		}
	}
	return out, nil
}

// runKey identifies a firing episode: fingerprint and start.
func runKey(a template.Alert) string {
	return a.Fingerprint + "@" + a.StartsAt.UTC().Format(time.RFC3339Nano)
}

// insertRunsChunk bounds the rows of one INSERT (11 parameters each), well under
// SQLite's and PostgreSQL's parameter limits.
const insertRunsChunk = 100

// insertRuns inserts a queued run for each firing alert at the given indexes, in
// one statement per chunk: in an alert storm almost every alert is new, and one
// round trip per chunk instead of three per alert is what keeps the ack fast on
// PostgreSQL. The database decides races: the run key is unique, and so is the
// fingerprint among unresolved runs; a row that conflicts is not inserted. It
// returns the new run's id by alert index.
func (s *Runs) insertRuns(ctx context.Context, tx *sql.Tx, alerts []template.Alert, idx []int, now time.Time) (map[int]string, error) {
	created := make(map[int]string, len(idx))
	for len(idx) > 0 {
		chunk := idx[:min(len(idx), insertRunsChunk)]
		idx = idx[len(chunk):]
		byKey := make(map[string]int, len(chunk))
		rows := make([]database.NewRun, 0, len(chunk))
		for _, i := range chunk {
			a := alerts[i]
			alertJSON, err := json.Marshal(a)
			if err != nil {
				return nil, fmt.Errorf("encode alert %s: %w", a.Fingerprint, err)
			}
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("run id: %w", err)
			}
			if _, dup := byKey[runKey(a)]; !dup {
				byKey[runKey(a)] = i
			}
			rows = append(rows, database.NewRun{ID: id.String(), Key: runKey(a), Fingerprint: a.Fingerprint,
				Alertname: untrusted.ClipTo(a.Labels["alertname"], untrusted.MaxIndexed), Alert: string(alertJSON), StartsAt: toMS(a.StartsAt), Status: vocab.StatusQueued,
				CreatedAt: toMS(now), QueuedAt: toMS(now), Instance: untrusted.ClipTo(a.Labels["instance"], untrusted.MaxIndexed),
				Model: untrusted.ClipTo(a.Labels["model_name"], untrusted.MaxIndexed)})
		}
		inserted, err := s.tables.Runs.Insert(ctx, tx, rows)
		if err != nil {
			return nil, fmt.Errorf("insert runs: %w", err)
		}
		for _, r := range inserted {
			created[byKey[r.Key]] = r.ID
		}
	}
	return created, nil
}

// replaceStaleRun handles a lost resolution. Alertmanager keeps an alert's
// startsAt for its whole episode, so a firing that started after the unresolved
// run of its fingerprint had already finished is a new episode whose
// predecessor's resolution never arrived (send_resolved: false, a resolution
// dropped or overtaken by a retry). Without this every later episode of the
// alert would join that finished run and never be captured again. The old run
// is marked resolved at the new start and a new run is inserted; it returns the
// new run's id by index, or nothing when run id is no such stale run (a repeat,
// or a startsAt shifted by an HA pair or a restart while the run still ran).
func (s *Runs) replaceStaleRun(ctx context.Context, tx *sql.Tx, id string, alerts []template.Alert, i int, now time.Time) (map[int]string, error) {
	a := alerts[i]
	stale, err := s.tables.Runs.ResolveStale(ctx, tx, id, toMS(a.StartsAt))
	if err != nil {
		return nil, fmt.Errorf("close stale run %s: %w", id, err)
	}
	if !stale {
		return nil, nil
	}
	s.log.Warn("A new firing started after its unresolved run had finished: the run's resolution was lost; resolving it and starting a new run.",
		zap.String("run", id), zap.String("fingerprint", a.Fingerprint), zap.Time("starts_at", a.StartsAt))
	return s.insertRuns(ctx, tx, alerts, []int{i}, now)
}

// existingRun returns the fingerprint's unresolved run, else the run of this
// exact episode (a late repeat of a resolved firing), else "".
func (s *Runs) existingRun(ctx context.Context, tx *sql.Tx, a template.Alert) (string, error) {
	id, err := s.tables.Runs.Unresolved(ctx, tx, a.Fingerprint)
	if errors.Is(err, sql.ErrNoRows) {
		id, err = s.tables.Runs.ByKey(ctx, tx, runKey(a))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find run: %w", err)
	}
	return id, nil
}

// acceptResolved sets resolved_at on the fingerprint's unresolved run (fresh:
// the thread is to say so). A repeat of a resolution already recorded answers
// with that run; with no run at all the alert is counted and logged, nothing
// more.
func (s *Runs) acceptResolved(ctx context.Context, tx *sql.Tx, a template.Alert, now time.Time) (acc runs.Accepted, fresh bool, err error) {
	acc = runs.Accepted{Fingerprint: a.Fingerprint, Outcome: runs.OutcomeResolved}
	at := a.EndsAt
	if at.IsZero() || at.After(now) {
		at = now
	}
	acc.RunID, err = s.tables.Runs.Resolve(ctx, tx, a.Fingerprint, toMS(at))
	if err == nil {
		return acc, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return acc, false, fmt.Errorf("resolve run: %w", err)
	}
	acc.RunID, err = s.tables.Runs.ResolvedRun(ctx, tx, runKey(a), a.Fingerprint, toMS(a.StartsAt))
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Accepted{Fingerprint: a.Fingerprint, Outcome: runs.OutcomeResolvedUnknown}, false, nil
	}
	if err != nil {
		return acc, false, fmt.Errorf("find resolved run: %w", err)
	}
	return acc, false, nil
}

// signalResolved tells a run this process executes that its alert resolved;
// other processes learn it from the row at their next heartbeat.
func (s *Runs) signalResolved(id string) {
	s.mu.Lock()
	h := s.active[id]
	s.mu.Unlock()
	if h != nil {
		h.resolve()
	}
}
