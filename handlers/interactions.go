package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/runs"
)

// Feedback is what POST /hooks/slack/interactions needs of the run service:
// recording a reader's answer to a run's verdict. *runner.Service satisfies it.
type Feedback interface {
	// Feedback records that user judged the run's verdict right (correct) or
	// wrong; a later answer of the same user replaces it. Errors wrap
	// runs.ErrNotFound for an unknown run, runs.ErrBadFeedback for an unknown
	// verdict or user; any other error is the store's.
	Feedback(ctx context.Context, runID, verdict string, correct bool, user runs.User) error
}

const (
	// maxInteractionBytes caps an interaction body: a block_actions payload is
	// a few kilobytes (it carries the message's blocks).
	maxInteractionBytes = 64 << 10
	// feedbackTimeout bounds the one write a click costs: Slack wants its 200
	// within 3 s, and shows the user an error otherwise.
	feedbackTimeout = 2 * time.Second
)

// interaction is what autocapture reads of Slack's block_actions payload.
type interaction struct {
	Type string `json:"type"`
	User struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		Username string `json:"username"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Message struct {
		TS string `json:"ts"`
	} `json:"message"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
}

// slackInteraction serves POST /hooks/slack/interactions: a click on a
// verdict's right/wrong button. Only a request Slack signed, within five
// minutes and not seen before, is read (401 otherwise, nothing recorded).
// Anything but our buttons is answered 200 and ignored, as is a click on a
// run this store does not know (Slack shows the user an error for any other
// answer, and there is nothing they could do about it). A store that fails
// is answered 503: the click was not kept, and the user may click again.
func (s *Server) slackInteraction(c *gin.Context) {
	body, ok := s.readLimited(c, maxInteractionBytes, "the interaction limit")
	if !ok {
		return
	}
	if word, why := s.slack.verify(c.Request.Header, body); word != "" {
		s.log.Warn("Slack interaction refused: not signed by Slack.", zap.String("error", word), zap.String("why", why),
			zap.String("remote", c.ClientIP()))
		fail(c, http.StatusUnauthorized, word, why)
		return
	}
	form, err := url.ParseQuery(string(body))
	var in interaction
	if err == nil {
		err = json.Unmarshal([]byte(form.Get("payload")), &in)
	}
	if err != nil {
		s.log.Warn("Slack interaction refused: no JSON payload field.", zap.Error(err))
		fail(c, http.StatusBadRequest, "bad_payload", "want a form with a JSON payload field: "+err.Error())
		return
	}
	if in.Type != "block_actions" {
		s.log.Debug("Slack interaction ignored: not a button.", zap.String("type", in.Type))
		c.Status(http.StatusOK)
		return
	}
	user := runs.User{ID: in.User.ID, Name: in.User.Name}
	if user.Name == "" {
		user.Name = in.User.Username
	}
	for _, a := range in.Actions {
		var correct bool
		switch a.ActionID {
		case slacknotify.ActionVerdictRight:
			correct = true
		case slacknotify.ActionVerdictWrong:
		default:
			s.log.Debug("Slack interaction ignored: not one of our actions.", zap.String("action", a.ActionID))
			continue
		}
		if !s.recordFeedback(c, a.Value, correct, user, in.Channel.ID, in.Message.TS) {
			return
		}
	}
	c.Status(http.StatusOK)
}

// recordFeedback records one click; false when it answered 503 (the store failed).
func (s *Server) recordFeedback(c *gin.Context, value string, correct bool, user runs.User, channel, ts string) bool {
	log := s.log.With(zap.String("user", user.ID), zap.Bool("correct", correct),
		zap.String("channel", channel), zap.String("message_ts", ts))
	runID, verdict, ok := slacknotify.ParseFeedbackValue(value)
	if !ok {
		log.Warn("Verdict feedback ignored: the button's value is not run|verdict.", zap.String("value", value))
		return true
	}
	log = log.With(zap.String("run", runID), zap.String("verdict", verdict))
	ctx, cancel := context.WithTimeout(c.Request.Context(), feedbackTimeout)
	defer cancel()
	err := s.opts.Feedback.Feedback(ctx, runID, verdict, correct, user)
	switch {
	case err == nil:
		log.Info("Verdict feedback recorded.")
	case errors.Is(err, runs.ErrNotFound), errors.Is(err, runs.ErrBadFeedback):
		log.Warn("Verdict feedback ignored: no such run or verdict here.", zap.Error(err))
	default:
		log.Error("Verdict feedback not recorded: the run store failed.", zap.Error(err))
		fail(c, http.StatusServiceUnavailable, "store_unavailable", "the feedback could not be recorded")
		return false
	}
	return true
}
