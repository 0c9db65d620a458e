package runpage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"go.uber.org/zap"

	slacknotify "github.com/autocapture/autocapture/notify/slack"
	"github.com/autocapture/autocapture/runner/actions"
	"github.com/autocapture/autocapture/runner/runs"
)

// The Silence form: a signed-in reader silences the run's alert from its
// page through the same actions as the Slack thread's buttons, so the
// thread gets the same reply and the run keeps the action. Each rendered
// form carries its own interaction id: submitted twice, it is one action
// (as a Slack retry is); another form, or another reader, finds the run's
// silence taken (as a second click does).

// Silencer is what the form needs of the run service: the actions Slack's
// buttons take (*actions.Actions).
type Silencer interface {
	Silence(ctx context.Context, c actions.Click) (actions.Result, error)
	Unsilence(ctx context.Context, c actions.Click) (actions.Result, error)
}

// Form fields and actions.
const (
	fieldChoice      = "choice"
	fieldInteraction = "interaction"
	fieldSilence     = "silence" // unsilence: the silencing action's id
	actSilence       = "silence"
	actUnsilence     = "unsilence"
)

// actionTimeout bounds the call to Alertmanager behind one submission; the
// call outlives a reader who gives up waiting, so it is never cut between
// the silence and its record.
const actionTimeout = time.Minute

// maxForm caps a form's body: it holds three short fields.
const maxForm = 16 << 10

var interactionID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// silenceView is the Silence section of a run's page.
type silenceView struct {
	SilenceURL, UnsilenceURL string // the form's addresses, relative to the page
	Interaction              string
	Choices                  []choice
	Live                     *runs.Action // the silence that holds, if any
	Pending                  *runs.Action // a silence being made, if any
	Resolved                 bool         // the alert resolved: nothing left to silence
	Notice                   string       // what became of the reader's last submission
}

type choice struct{ Choice, Text string }

// notices are what a submission's result says on the page it returns to;
// the page's address carries only the key, never text.
var notices = map[string]string{
	"silence/done":    "Silenced: Alertmanager holds the silence below, and the Slack thread says so.",
	"silence/failed":  "Nothing was silenced: Alertmanager did not make the silence (the actions below say why). Check alertmanager.urls and that Alertmanager is up, then try again.",
	"silence/already": "Already silenced: who silenced it, and until when, is below.",
	"silence/busy":    "Someone is silencing this alert right now: reload in a moment.",
	"silence/" + actions.ResultUnmatched: "Nothing was silenced: the alert carries none of the labels its silence matches on, " +
		"and a silence without matchers would silence every alert. Silence it in Alertmanager by hand, or name labels " +
		"the alert carries in the playbook's silence.matchers.",
	"silence/" + actions.ResultUnplanned: "Nothing was silenced: this run has not chosen its playbook yet, so what its " +
		"silence should match is not known. Try again once it starts.",
	"unsilence/done":    "The silence is expired: the alert notifies again.",
	"unsilence/failed":  "The silence still holds: Alertmanager did not expire it (the actions below say why). Try again once it answers.",
	"unsilence/already": "That silence was already expired.",
	"unsilence/busy":    "Someone is expiring this silence right now: reload in a moment.",
}

func newSilenceView(r *runs.Run, result string) *silenceView {
	v := &silenceView{SilenceURL: url.PathEscape(r.ID) + "/silence", UnsilenceURL: url.PathEscape(r.ID) + "/unsilence",
		Interaction: newInteraction(), Resolved: r.ResolvedAt != nil, Notice: notices[result]}
	for _, c := range slacknotify.SilenceChoices {
		v.Choices = append(v.Choices, choice{c.Choice, c.Text})
	}
	for i := range r.Actions {
		a := &r.Actions[i]
		if a.Kind != actions.KindSilence {
			continue
		}
		switch {
		case a.Live && a.State == "done":
			v.Live = a
		case a.State == "pending":
			v.Pending = a
		}
	}
	return v
}

func newInteraction() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand never fails on a supported platform
	return hex.EncodeToString(b)
}

// Silence serves POST /runs/{id}/silence: choice and interaction.
func (p *Pages) Silence(w http.ResponseWriter, r *http.Request, rd Reader, id string) {
	p.act(w, r, rd, id, actSilence)
}

// Unsilence serves POST /runs/{id}/unsilence: silence (the silencing
// action's id) and interaction.
func (p *Pages) Unsilence(w http.ResponseWriter, r *http.Request, rd Reader, id string) {
	p.act(w, r, rd, id, actUnsilence)
}

// Refuse answers a reader who may not act (a page link's) with v, counted.
func (p *Pages) Refuse(w http.ResponseWriter, r *http.Request, action string, v Refusal) {
	p.actions.WithLabelValues(action, "refused").Inc()
	p.Refused(w, r, http.StatusForbidden, v)
}

func (p *Pages) act(w http.ResponseWriter, r *http.Request, rd Reader, id, kind string) {
	home := homeOf(rd, 2) // the form posts to /runs/{id}/{kind}
	if !rd.SignedIn {     // handlers refuses these first; never act for one that slipped through
		p.Refuse(w, r, kind, Refusal{Title: "Sign-in needed", Lines: []string{"Only a signed-in reader may " + kind + " from the run page."}})
		return
	}
	if p.o.Silencer == nil {
		p.errorPage(w, r, home, http.StatusNotFound, "silencing from the run page is off: it needs alertmanager.urls and notify.slack.actions.silence.enabled")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		p.errorPage(w, r, home, http.StatusBadRequest, "the form does not read: "+err.Error())
		return
	}
	c, code, msg := p.click(r, rd.User, id, kind)
	if code != 0 {
		p.errorPage(w, r, home, code, msg)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	take := p.o.Silencer.Silence
	if kind == actUnsilence {
		take = p.o.Silencer.Unsilence
	}
	res, err := take(ctx, c)
	log := p.o.Log.With(zap.String("action", kind), zap.String("run", id), zap.String("user", c.UserName+" ("+c.UserID+")"))
	switch {
	case errors.Is(err, actions.ErrUnknown):
		p.actions.WithLabelValues(kind, "unknown").Inc()
		p.errorPage(w, r, home, http.StatusNotFound, "nothing was done: "+err.Error())
		return
	case err != nil:
		p.actions.WithLabelValues(kind, "error").Inc()
		log.Error("Run page action failed: the run store did not keep it.", zap.Error(err))
		p.errorPage(w, r, home, http.StatusServiceUnavailable, "nothing was done: autocapture's run store failed ("+err.Error()+"); try again in a minute")
		return
	}
	p.actions.WithLabelValues(kind, res.Result).Inc()
	log.Info("Run page action taken.", zap.String("result", res.Result))
	// Post/redirect/get: a reload shows the page, never submits again.
	http.Redirect(w, r, "../"+url.PathEscape(id)+"?result="+url.QueryEscape(kind+"/"+res.Result)+"#silence", http.StatusSeeOther)
}

// click reads the form as the action's click; a code other than 0 refuses
// it with msg.
func (p *Pages) click(r *http.Request, u runs.User, id, kind string) (actions.Click, int, string) {
	nonce := r.PostForm.Get(fieldInteraction)
	if !interactionID.MatchString(nonce) {
		return actions.Click{}, http.StatusBadRequest, "the form carries no valid interaction id: reload the run page and submit it again"
	}
	c := actions.Click{Interaction: "web/" + nonce, UserID: u.ID, UserName: u.Name}
	if kind == actSilence {
		c.RunID, c.Choice = id, r.PostForm.Get(fieldChoice)
		for _, ch := range slacknotify.SilenceChoices {
			if ch.Choice == c.Choice {
				return c, 0, ""
			}
		}
		return actions.Click{}, http.StatusBadRequest, "choice must be one of 1h, 4h, 24h or resolved, got " + strconv.Quote(c.Choice)
	}
	c.SilenceAction = r.PostForm.Get(fieldSilence)
	run, err := p.o.Runs.Get(r.Context(), id)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return actions.Click{}, http.StatusNotFound, "no run " + strconv.Quote(id)
	case err != nil:
		return actions.Click{}, http.StatusServiceUnavailable, "nothing was done: the run store does not answer: " + err.Error()
	}
	for _, a := range run.Actions {
		if a.ID == c.SilenceAction && a.Kind == actions.KindSilence {
			return c, 0, ""
		}
	}
	return actions.Click{}, http.StatusNotFound, "run " + strconv.Quote(id) + " made no silence " + strconv.Quote(c.SilenceAction)
}
