package handlers

import (
	"context"
	"errors"

	"github.com/autocapture/autocapture/config"
	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/actions"
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

// Actions is what the thread's actions (Silence…, Unsilence, Profile
// again) need of the run service. *actions.Actions
// (runner.Service.Actions) satisfies it.
type Actions interface {
	Silence(ctx context.Context, c actions.Click) (actions.Result, error)
	Unsilence(ctx context.Context, c actions.Click) (actions.Result, error)
	ProfileAgain(ctx context.Context, c actions.Click) (actions.Result, error)
	Refused(ctx context.Context, c actions.Click, why string) error
}

// SlackActions turns the thread's actions on: the run service, who may use
// them, and the bot's token and API URL for private answers and user groups.
type SlackActions struct {
	Actions Actions
	Access  config.SlackActions
	Token   config.Secret
	APIURL  string
}

// slackActions is Actions in notify/slack's terms.
type slackActions struct{ Actions }

var _ slacknotify.ActionTaker = slackActions{}

func click(c slacknotify.Click) actions.Click {
	a := actions.Click{Choice: c.Choice, Interaction: c.Interaction, UserID: c.User.ID, UserName: c.User.Name}
	if c.Action == "unsilence" {
		a.SilenceAction = c.Value
	} else {
		a.RunID = c.Value
	}
	return a
}

func (s slackActions) Silence(ctx context.Context, c slacknotify.Click) (slacknotify.ActionResult, error) {
	return actionAnswer(s.Actions.Silence(ctx, click(c)))
}

func (s slackActions) Unsilence(ctx context.Context, c slacknotify.Click) (slacknotify.ActionResult, error) {
	return actionAnswer(s.Actions.Unsilence(ctx, click(c)))
}

func (s slackActions) ProfileAgain(ctx context.Context, c slacknotify.Click) (slacknotify.ActionResult, error) {
	return actionAnswer(s.Actions.ProfileAgain(ctx, click(c)))
}

func (s slackActions) Refused(ctx context.Context, c slacknotify.Click, why string) error {
	return s.Actions.Refused(ctx, click(c), why)
}

// actionAnswer turns a click on a run or action the store does not know into a
// private line, not a store failure.
func actionAnswer(r actions.Result, err error) (slacknotify.ActionResult, error) {
	if errors.Is(err, actions.ErrUnknown) {
		return slacknotify.ActionResult{Result: "unknown", Private: "Nothing was done: " + err.Error() + "."}, nil
	}
	return slacknotify.ActionResult{Result: r.Result, Private: r.Private}, err
}
