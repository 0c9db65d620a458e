package handlers

import (
	"context"
	"errors"

	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/runs"
)

// Slack's interactivity (POST /hooks/slack/interactions: a click on a
// verdict's right/wrong button) lives in notify/slack, with the rest of
// Slack; handlers only mounts it and hands it the run service.

// Feedback is what POST /hooks/slack/interactions needs of the run service:
// recording a reader's answer to a run's verdict. *runner.Service satisfies it.
type Feedback interface {
	// Feedback records that user judged the run's verdict right (correct) or
	// wrong; a later answer of the same user replaces it. Errors wrap
	// runs.ErrNotFound for an unknown run, runs.ErrBadFeedback for an unknown
	// verdict or user; any other error is the store's.
	Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error
}

// slackFeedback is Feedback in notify/slack's terms: an unknown run or
// verdict becomes slacknotify.UnknownFeedback (the click is ignored, not
// answered 503).
type slackFeedback struct{ Feedback }

var _ slacknotify.FeedbackRecorder = slackFeedback{}

func (f slackFeedback) RecordFeedback(ctx context.Context, runID, verdict string, correct bool, user slacknotify.User) error {
	err := f.Feedback.Feedback(ctx, runID, verdict, correct, runs.User{ID: user.ID, Name: user.Name})
	if errors.Is(err, runs.ErrNotFound) || errors.Is(err, runs.ErrBadFeedback) {
		return slacknotify.UnknownFeedback(err)
	}
	return err
}
