package database

import "context"

// Feedback is autocapture_feedback: readers' answers to a run's verdict, one
// row per run and user.
type Feedback struct{ d Dialect }

// FeedbackRow is one reader's answer.
type FeedbackRow struct {
	Verdict          string
	Correct          bool
	UserID, UserName string
	At               int64 // Unix ms, the database's clock
}

// Put records user's answer on run runID unless the run does not exist: it
// returns the rows written, 0 for no such run or for the same answer again.
// The DO UPDATE's WHERE leaves a repeated answer untouched (0 rows), so the
// count only moves when the answer does.
func (f Feedback) Put(ctx context.Context, q Querier, runID, userID, userName, verdict string, correct bool) (int64, error) {
	c := 0
	if correct {
		c = 1
	}
	res, err := q.ExecContext(ctx, f.d.SQL(`INSERT INTO autocapture_feedback (run_id, user_id, user_name, verdict, correct, at)
		SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS INTEGER), {now}
		WHERE EXISTS (SELECT 1 FROM autocapture_runs WHERE id = $1)
		ON CONFLICT (run_id, user_id) DO UPDATE SET user_name = excluded.user_name, verdict = excluded.verdict,
			correct = excluded.correct, at = excluded.at
		WHERE autocapture_feedback.verdict <> excluded.verdict OR autocapture_feedback.correct <> excluded.correct`),
		runID, userID, userName, verdict, c)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// List returns run runID's answers, oldest first.
func (Feedback) List(ctx context.Context, q RowsQuerier, runID string) ([]FeedbackRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT verdict, correct, user_id, user_name, at FROM autocapture_feedback
		WHERE run_id = $1 ORDER BY at, user_id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []FeedbackRow{}
	for rows.Next() {
		var f FeedbackRow
		var correct int64
		if err := rows.Scan(&f.Verdict, &correct, &f.UserID, &f.UserName, &f.At); err != nil {
			return nil, err
		}
		f.Correct = correct != 0
		out = append(out, f)
	}
	return out, rows.Err()
}
