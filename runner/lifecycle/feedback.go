package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/actions"
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
func (s *Runs) Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error {
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
	n, err := s.tables.Feedback.Put(ctx, s.db, runID, user.ID, name, verdict, correct)
	if err != nil {
		return fmt.Errorf("runner: feedback on run %s: %w", runID, err)
	}
	if n > 0 {
		s.m.Feedback.WithLabelValues(verdict, strconv.FormatBool(correct)).Inc()
		return nil
	}
	// Nothing written: the same answer again, or no such run.
	ok, err := s.tables.Runs.Exists(ctx, s.db, runID)
	if err != nil {
		return fmt.Errorf("runner: feedback on run %s: %w", runID, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", runs.ErrNotFound, runID)
	}
	return nil
}

// loadFeedback returns a run's feedback, oldest answer first.
func (s *Runs) loadFeedback(ctx context.Context, q reader, id string) ([]runs.Feedback, error) {
	rows, err := s.tables.Feedback.List(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("runner: feedback of run %s: %w", id, err)
	}
	out := make([]runs.Feedback, 0, len(rows))
	for _, r := range rows {
		out = append(out, runs.Feedback{Verdict: r.Verdict, Correct: r.Correct,
			User: runs.User{ID: r.UserID, Name: r.UserName}, At: fromMS(r.At)})
	}
	return out, nil
}

// loadActions returns what people did from a run's thread, oldest first.
func (s *Runs) loadActions(ctx context.Context, q reader, id string) ([]runs.Action, error) {
	rows, err := s.tables.Actions.List(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("runner: actions of run %s: %w", id, err)
	}
	out := make([]runs.Action, 0, len(rows))
	for _, r := range rows {
		a := runs.Action{ID: r.ID, Kind: r.Kind, Arg: r.Arg, User: runs.User{ID: r.UserID, Name: r.UserName},
			State: r.State, Detail: r.Detail, SilenceID: r.SilenceID.String, Live: r.Slot.Valid && r.State == "done" && r.Kind == actions.KindSilence,
			At: fromMS(r.CreatedAt)}
		if r.EndsAt.Valid {
			t := fromMS(r.EndsAt.Int64)
			a.EndsAt = &t
		}
		out = append(out, a)
	}
	return out, nil
}
