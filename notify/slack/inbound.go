package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/clip"
)

// The inbound side: Slack's interactivity requests, a click on a verdict's
// right/wrong button (the buttons RenderParent draws). Interactions is an
// http.Handler; handlers mounts it at POST /hooks/slack/interactions.

// User is who clicked: Slack's user id, and their name (the display name
// Slack sent, else the username).
type User struct {
	ID   string
	Name string
}

// FeedbackRecorder is what a click needs of the run service: recording a
// reader's answer to a run's verdict. handlers adapts the runner to it.
type FeedbackRecorder interface {
	// RecordFeedback records that user judged the run's verdict right
	// (correct) or wrong; a later answer of the same user replaces it. An
	// error wrapping ErrUnknownFeedback (see UnknownFeedback) means the store
	// knows no such run or verdict, or refuses the user: the click is
	// answered 200 and logged. Any other error is the store's: 503.
	RecordFeedback(ctx context.Context, runID, verdict string, correct bool, user User) error
}

// ErrUnknownFeedback marks feedback the store does not take: no such run or
// verdict there, or no user.
var ErrUnknownFeedback = errors.New("slack: feedback about no run or verdict the store knows")

// UnknownFeedback wraps err, the store's refusal of a click it cannot take
// (an unknown run or verdict), so that it is ignored rather than answered
// 503. Its text is err's; errors.Is finds both err and ErrUnknownFeedback.
func UnknownFeedback(err error) error { return unknownFeedback{err} }

type unknownFeedback struct{ err error }

func (e unknownFeedback) Error() string        { return e.err.Error() }
func (e unknownFeedback) Unwrap() error        { return e.err }
func (e unknownFeedback) Is(target error) bool { return target == ErrUnknownFeedback }

const (
	// maxInteractionBytes caps an interaction body: a block_actions payload is
	// a few kilobytes (it carries the message's blocks).
	maxInteractionBytes = 64 << 10
	// feedbackTimeout bounds the one write a click costs: Slack wants its 200
	// within 3 s, and shows the user an error otherwise.
	feedbackTimeout = 2 * time.Second
	// maxReason clips the reason line of an error answer (as handlers does).
	maxReason = 200
)

// InteractionsOptions configures NewInteractions.
type InteractionsOptions struct {
	// SigningSecret (notify.slack.signing_secret, resolved) verifies Slack's
	// requests; required.
	SigningSecret config.Secret
	// Feedback records the answers to a verdict's buttons; required.
	Feedback FeedbackRecorder
	// Registerer receives autocapture_slack_interactions_total; nil: not
	// registered.
	Registerer prometheus.Registerer
	// Now is the clock request timestamps are held to; nil means time.Now.
	Now func() time.Time
	// Log is required.
	Log *zap.Logger
	// Actions takes the thread's actions (Silence…, Unsilence); nil: their
	// clicks are ignored. Access says who may; Token and APIURL reach Slack
	// for the private answers and the user groups.
	Actions ActionTaker
	Access  config.SlackActions
	Token   config.Secret
	APIURL  string
}

// Interactions serves Slack's interactivity endpoint (POST
// /hooks/slack/interactions, routed by handlers): a click on a verdict's
// right/wrong button. Only a request Slack signed, within five minutes and
// not seen before, is read (401 otherwise, nothing recorded). Anything but
// our buttons is answered 200 and ignored, as is a click on a run the store
// does not know (Slack shows the user an error for any other answer, and
// there is nothing they could do about it). A store that fails is answered
// 503: the click was not kept, and the user may click again. Every answer is
// counted in autocapture_slack_interactions_total{code}.
type Interactions struct {
	verify   *verifier
	feedback FeedbackRecorder
	actions  *actions // nil: no actions
	answered *prometheus.CounterVec
	log      *zap.Logger
}

// NewInteractions builds the interactivity endpoint and registers its
// counter on o.Registerer.
func NewInteractions(o InteractionsOptions) (*Interactions, error) {
	if o.SigningSecret.Blank() || o.Feedback == nil || o.Log == nil {
		return nil, errors.New("slack interactions: a signing secret, Feedback and Log are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Interactions{
		verify:   newVerifier(strings.TrimSpace(o.SigningSecret.Reveal()), o.Now),
		feedback: o.Feedback,
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_slack_interactions_total",
			Help: "Slack interactivity requests (verdict buttons) answered, by HTTP status code (401: not signed by Slack).",
		}, []string{"code"}),
		log: o.Log,
	}
	cs := []prometheus.Collector{h.answered}
	if o.Actions != nil {
		h.actions = newActions(o)
		cs = append(cs, h.actions.total)
	}
	for _, c := range cs {
		if o.Registerer == nil {
			break
		}
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("slack interactions: register metrics: %w", err)
		}
	}
	return h, nil
}

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
		ActionTS string `json:"action_ts"`
	} `json:"actions"`
}

// ServeHTTP answers one interactivity request and counts it by its code.
func (h *Interactions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code := h.serve(w, r)
	h.answered.WithLabelValues(strconv.Itoa(code)).Inc()
}

// serve answers r and returns the code it answered with.
func (h *Interactions) serve(w http.ResponseWriter, r *http.Request) int {
	body, code := h.readLimited(w, r)
	if code != 0 {
		return code
	}
	if word, why := h.verify.verify(r.Header, body); word != "" {
		h.log.Warn("Slack interaction refused: not signed by Slack.", zap.String("error", word), zap.String("why", why),
			zap.String("remote", remoteIP(r)))
		return refuse(w, http.StatusUnauthorized, word, why)
	}
	form, err := url.ParseQuery(string(body))
	var in interaction
	if err == nil {
		err = json.Unmarshal([]byte(form.Get("payload")), &in)
	}
	if err != nil {
		h.log.Warn("Slack interaction refused: no JSON payload field.", zap.Error(err))
		return refuse(w, http.StatusBadRequest, "bad_payload", "want a form with a JSON payload field: "+err.Error())
	}
	if in.Type != "block_actions" {
		h.log.Debug("Slack interaction ignored: not a button.", zap.String("type", in.Type))
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
	user := User{ID: in.User.ID, Name: in.User.Name}
	if user.Name == "" {
		user.Name = in.User.Username
	}
	for _, a := range in.Actions {
		var correct bool
		switch a.ActionID {
		case ActionVerdictRight:
			correct = true
		case ActionVerdictWrong:
		default:
			if c, ok := clickOf(a.ActionID, a.Value, a.ActionTS, in, user); ok && h.actions != nil {
				h.actions.start(c)
				continue
			}
			h.log.Debug("Slack interaction ignored: not one of our actions.", zap.String("action", a.ActionID))
			continue
		}
		if !h.recordFeedback(r.Context(), a.Value, correct, user, in.Channel.ID, in.Message.TS) {
			return refuse(w, http.StatusServiceUnavailable, "store_unavailable", "the feedback could not be recorded")
		}
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// recordFeedback records one click; false when the store failed (the
// caller answers 503).
func (h *Interactions) recordFeedback(ctx context.Context, value string, correct bool, user User, channel, ts string) bool {
	log := h.log.With(zap.String("user", user.ID), zap.Bool("correct", correct),
		zap.String("channel", channel), zap.String("message_ts", ts))
	runID, verdict, ok := ParseFeedbackValue(value)
	if !ok {
		log.Warn("Verdict feedback ignored: the button's value is not run|verdict.", zap.String("value", value))
		return true
	}
	log = log.With(zap.String("run", runID), zap.String("verdict", verdict))
	ctx, cancel := context.WithTimeout(ctx, feedbackTimeout)
	defer cancel()
	err := h.feedback.RecordFeedback(ctx, runID, verdict, correct, user)
	switch {
	case err == nil:
		log.Info("Verdict feedback recorded.")
	case errors.Is(err, ErrUnknownFeedback):
		log.Warn("Verdict feedback ignored: no such run or verdict here.", zap.Error(err))
	default:
		log.Error("Verdict feedback not recorded: the run store failed.", zap.Error(err))
		return false
	}
	return true
}

// readLimited reads the body under maxInteractionBytes; a code other than 0
// means it answered (413 beyond the limit, 400 for a body it could not read).
func (h *Interactions) readLimited(w http.ResponseWriter, r *http.Request) ([]byte, int) {
	const max, setting = maxInteractionBytes, "the interaction limit"
	if r.ContentLength > max {
		return nil, h.tooLarge(w, r, r.ContentLength, max, setting)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, h.tooLarge(w, r, -1, max, setting)
		}
		return nil, refuse(w, http.StatusBadRequest, "unreadable_body", "reading the body: "+err.Error())
	}
	return body, 0
}

func (h *Interactions) tooLarge(w http.ResponseWriter, r *http.Request, size, max int64, setting string) int {
	got := "more"
	if size >= 0 {
		got = strconv.FormatInt(size, 10)
	}
	h.log.Warn("Request refused: body too large.", zap.String("path", r.URL.Path),
		zap.String("size", got), zap.Int64("limit", max))
	return refuse(w, http.StatusRequestEntityTooLarge, "body_too_large",
		fmt.Sprintf("body of %s bytes exceeds %s (%d)", got, setting, max))
}

// errorBody is every error answer, the shape of handlers' own: a machine
// word and one line for people.
type errorBody struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// refuse answers code with a JSON error body and returns code.
func refuse(w http.ResponseWriter, code int, word, reason string) int {
	b, _ := json.Marshal(errorBody{Status: "error", Error: word, Reason: clip.Line(reason, maxReason)}) // strings only: cannot fail
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	return code
}

// remoteIP is the peer's address for the log, as handlers logs it (its
// router trusts no X-Forwarded-For): the host of RemoteAddr, "" if none.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(strings.TrimSpace(r.RemoteAddr))
	if err != nil {
		return ""
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return ""
	}
	return ip.String()
}
