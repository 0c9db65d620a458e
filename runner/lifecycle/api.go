package lifecycle

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Get returns a run with its steps, verdict history and feedback, or runs.ErrNotFound.
func (s *Runs) Get(ctx context.Context, id string) (*runs.Run, error) {
	// One read snapshot: the row's verdict (the latest) and the history,
	// steps and uploads beside it are of one moment (read apart, a
	// preliminary verdict committed between two reads showed in the history
	// with none on the run). SQLite's read transaction is a snapshot from
	// its first read; PostgreSQL needs repeatable read for one.
	var opts *sql.TxOptions
	if s.dialect == database.Postgres {
		opts = &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("runner: run %s: %w", id, err)
	}
	defer tx.Rollback()
	r, err := s.getRow(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if r.Steps, err = s.loadSteps(ctx, tx, id); err != nil {
		return nil, err
	}
	if r.Feedback, err = s.loadFeedback(ctx, tx, id); err != nil {
		return nil, err
	}
	if r.Verdicts, err = s.loadVerdicts(ctx, tx, id); err != nil {
		return nil, err
	}
	if r.Actions, err = s.loadActions(ctx, tx, id); err != nil {
		return nil, err
	}
	if r.SeenBefore, err = s.seenBefore(ctx, tx, r); err != nil {
		return nil, err
	}
	if r.Repeat, err = s.repeat(ctx, tx, r, r.SeenBefore, r.Verdict); err != nil {
		return nil, err
	}
	if r.Uploads, err = s.art.LoadUploads(ctx, tx, id); err != nil {
		return nil, err
	}
	return &r.Run, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// reader is a querier that also lists rows: *sql.DB, or a *sql.Tx for reads
// of one snapshot (Get).
type reader interface {
	querier
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func (s *Runs) getRow(ctx context.Context, q querier, id string) (*runRow, error) {
	raw, err := s.tables.Runs.Get(ctx, q, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", runs.ErrNotFound, id)
	}
	var r *runRow
	if err == nil {
		r, err = decodeRun(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("runner: get run %s: %w", id, err)
	}
	return r, nil
}

// loadSteps returns a run's step records in the order they finished.
func (s *Runs) loadSteps(ctx context.Context, q reader, id string) ([]executor.StepRecord, error) {
	records, err := s.tables.Steps.List(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("runner: steps of run %s: %w", id, err)
	}
	steps := []executor.StepRecord{}
	for _, raw := range records {
		var rec executor.StepRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("runner: steps of run %s: decode: %w", id, err)
		}
		steps = append(steps, rec)
	}
	return steps, nil
}

// List returns runs newest first, filtered by alertname and status, a page at a
// time (runs.Page.Next is the cursor of the next page). Steps are left out.
func (s *Runs) List(ctx context.Context, q runs.ListQuery) (runs.Page, error) {
	f, limit, err := ListFilter(q)
	if err != nil {
		return runs.Page{}, err
	}
	rows, err := s.tables.Runs.List(ctx, s.db, f)
	if err != nil {
		return runs.Page{}, fmt.Errorf("runner: list runs: %w", err)
	}
	page := runs.Page{Runs: []runs.Run{}}
	for _, raw := range rows {
		r, err := decodeRun(raw)
		if err != nil {
			return runs.Page{}, fmt.Errorf("runner: list runs: %w", err)
		}
		page.Runs = append(page.Runs, r.Run)
	}
	if len(page.Runs) > limit {
		last := page.Runs[limit-1]
		page.Runs = page.Runs[:limit]
		page.Next = encodeCursor(toMS(last.CreatedAt), last.ID)
	}
	return page, nil
}

// ListFilter is List's selection: newest first, by alertname and status
// (each served by an index, see database.ListQuery), after the cursor. It
// returns the page size asked for (one more row is selected, to know of a
// next page).
func ListFilter(q runs.ListQuery) (database.RunFilter, int, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 500)
	f := database.RunFilter{Alertname: q.Alertname, Status: q.Status, Limit: limit + 1}
	if q.Cursor != "" {
		ms, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return database.RunFilter{}, 0, err
		}
		f.AfterCreatedAt, f.AfterID = ms, id
	}
	return f, limit, nil
}

func encodeCursor(ms int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(ms, 10) + "/" + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %v", runs.ErrBadCursor, err)
	}
	msText, id, ok := strings.Cut(string(b), "/")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", fmt.Errorf("%w: %q", runs.ErrBadCursor, c)
	}
	return ms, id, nil
}

// Cancel asks for a run to stop. A queued run ends cancelled at once; a running
// one is cancelled by the process holding it (a flag on the row its heartbeat
// reads, so it works across processes). runs.ErrFinished for a run that has ended.
func (s *Runs) Cancel(ctx context.Context, id string) (*runs.Run, error) {
	asked, err := s.tables.Runs.RequestCancel(ctx, s.db, id)
	if err != nil {
		return nil, fmt.Errorf("runner: cancel run %s: %w", id, err)
	}
	if !asked {
		r, err := s.getRow(ctx, s.db, id)
		if err != nil {
			return nil, err
		}
		return &r.Run, fmt.Errorf("%w: %s is %s", runs.ErrFinished, id, r.Status)
	}
	// Nobody holds it and it has no thread yet: end it here; a job that picks it
	// up later finds it finished. A run with a thread (one resumed between
	// owners) is ended by its next claim, which also closes the thread.
	if err := s.tables.Runs.EndUnstarted(ctx, s.db, id, vocab.StatusCancelled, "cancelled before it started"); err != nil {
		return nil, fmt.Errorf("runner: cancel run %s: %w", id, err)
	}
	s.mu.Lock()
	h := s.active[id]
	s.mu.Unlock()
	if h != nil {
		h.cancel(executor.ErrCancelled)
	}
	return s.Get(ctx, id)
}
