package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Bounds of what a feedback row keeps of the user (Slack ids are ~11
// characters, names at most 80).
const (
	maxFeedbackUserID   = 64
	maxFeedbackUserName = 200
)

// Feedback records a reader's answer to a run's verdict: correct says the
// verdict was right. One answer per run and user: a later one overwrites it.
// It is one statement (an upsert guarded by the run's existence), fast enough
// for Slack's 3-second answer. Errors wrap runs.ErrNotFound for an unknown
// run and runs.ErrBadFeedback for a verdict that is not one of
// vocab.Verdicts or an empty user id. An answer that changes nothing (the
// same click again) is not counted twice.
func (s *Service) Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error {
	if !slices.Contains(vocab.Verdicts, verdict) {
		return fmt.Errorf("%w: verdict %q is not one of vocab.Verdicts", runs.ErrBadFeedback, clip.String(verdict, 80))
	}
	if user.ID == "" || len(user.ID) > maxFeedbackUserID || !utf8.ValidString(user.ID) {
		return fmt.Errorf("%w: user id %q", runs.ErrBadFeedback, clip.String(user.ID, 80))
	}
	name := user.Name
	if !utf8.ValidString(name) {
		name = ""
	}
	name = clip.String(name, maxFeedbackUserName)
	c := 0
	if correct {
		c = 1
	}
	// The DO UPDATE's WHERE leaves a repeated answer untouched (0 rows), so
	// the count only moves when the answer does.
	res, err := s.db.ExecContext(ctx, s.dialect.sql(`INSERT INTO autocapture_feedback (run_id, user_id, user_name, verdict, correct, at)
		SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS INTEGER), {now}
		WHERE EXISTS (SELECT 1 FROM autocapture_runs WHERE id = $1)
		ON CONFLICT (run_id, user_id) DO UPDATE SET user_name = excluded.user_name, verdict = excluded.verdict,
			correct = excluded.correct, at = excluded.at
		WHERE autocapture_feedback.verdict <> excluded.verdict OR autocapture_feedback.correct <> excluded.correct`),
		runID, user.ID, name, verdict, c)
	if err != nil {
		return fmt.Errorf("runner: feedback on run %s: %w", runID, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		s.m.feedback.WithLabelValues(verdict, strconv.FormatBool(correct)).Inc()
		return nil
	}
	// Nothing written: the same answer again, or no such run.
	var one int
	err = s.db.QueryRowContext(ctx, `SELECT 1 FROM autocapture_runs WHERE id = $1`, runID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", runs.ErrNotFound, runID)
	}
	if err != nil {
		return fmt.Errorf("runner: feedback on run %s: %w", runID, err)
	}
	return nil
}

// loadFeedback returns a run's feedback, oldest answer first.
func (s *Service) loadFeedback(ctx context.Context, q reader, id string) ([]runs.Feedback, error) {
	rows, err := q.QueryContext(ctx, `SELECT verdict, correct, user_id, user_name, at FROM autocapture_feedback
		WHERE run_id = $1 ORDER BY at, user_id`, id)
	if err != nil {
		return nil, fmt.Errorf("runner: feedback of run %s: %w", id, err)
	}
	defer rows.Close()
	out := []runs.Feedback{}
	for rows.Next() {
		var f runs.Feedback
		var correct, at int64
		if err := rows.Scan(&f.Verdict, &correct, &f.User.ID, &f.User.Name, &at); err != nil {
			return nil, fmt.Errorf("runner: feedback of run %s: %w", id, err)
		}
		f.Correct, f.At = correct != 0, fromMS(at)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runner: feedback of run %s: %w", id, err)
	}
	return out, nil
}
