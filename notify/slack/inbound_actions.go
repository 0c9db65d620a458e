package slack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
)

// The thread's actions (Silence…, Unsilence, Profile again): who may press them, the call
// to the run service, and a private answer to the clicker. The work runs
// after the 200 (Slack wants one within 3 s; Alertmanager may take longer),
// bounded by actionTimeout; a process that dies meanwhile leaves a pending
// action row the run service resumes.

// ActionTaker is what the thread's actions need of the run service.
type ActionTaker interface {
	// Silence silences the run's alert as c.Choice says; Unsilence expires
	// the silence of action c.Value; ProfileAgain takes run c.Value's
	// profile again. Each is idempotent on c.Interaction.
	Silence(ctx context.Context, c Click) (ActionResult, error)
	Unsilence(ctx context.Context, c Click) (ActionResult, error)
	ProfileAgain(ctx context.Context, c Click) (ActionResult, error)
	// Refused keeps a click the access rules turned down, with why.
	Refused(ctx context.Context, c Click, why string) error
}

// Click is one press of an action's button.
type Click struct {
	Action      string // "silence", "unsilence" or "profile"
	Value       string // the run id (silence, profile) or the silencing action's id (unsilence)
	Choice      string // 1h, 4h, 24h or resolved (silence)
	Interaction string // the click: message ts and action_ts, which a retry repeats
	User        User
	Channel     string
	MessageTS   string
}

// ActionResult is what became of a click: Result is a word for the metric
// (done, failed, already, busy, guard: the profiling guard said no), Private a line for the clicker alone ("" to
// say nothing: the thread's reply says it).
type ActionResult struct {
	Result, Private string
}

// actionTimeout bounds one action's work after the click was answered.
const actionTimeout = time.Minute

// groupTTL is how long a user group's members are trusted before they are
// read again.
const groupTTL = 5 * time.Minute

// actions is the interactivity endpoint's side for the thread's actions.
type actions struct {
	taker  ActionTaker
	access config.SlackActions
	api    *slack.Client
	total  *prometheus.CounterVec
	log    *zap.Logger
	wg     sync.WaitGroup

	mu     sync.Mutex
	groups map[string]groupMembers
	// recent are the interactions started here, for retryWindow: Slack
	// redelivers a click it thinks unanswered, and the redelivery may run
	// before the first (clicks run concurrently) and answer the clicker twice.
	recent map[string]time.Time
}

// retryWindow is how long a click's redelivery is recognised: Slack retries
// within seconds. Another replica's redelivery is left to the run service's
// action rows.
const retryWindow = 5 * time.Minute

type groupMembers struct {
	users []string
	at    time.Time
}

func newActions(o InteractionsOptions) *actions {
	api := o.APIURL
	if api == "" {
		api = config.DefaultSlackAPIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	return &actions{taker: o.Actions, access: o.Access, log: o.Log,
		api: slack.New(o.Token.Reveal(), slack.OptionAPIURL(api)), groups: map[string]groupMembers{},
		recent: map[string]time.Time{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autocapture_slack_actions_total",
			Help: "Actions taken from a run's Slack thread (silence, unsilence, profile), by result: done, failed, already, busy, refused, guard.",
		}, []string{"action", "result"})}
}

// click reads a button press as an action; false for any other button.
func clickOf(actionID, value, actionTS string, in interaction, user User) (Click, bool) {
	c := Click{Value: value, User: user, Channel: in.Channel.ID, MessageTS: in.Message.TS,
		Interaction: in.Message.TS + "/" + actionTS}
	if choice, ok := silenceChoice(actionID); ok {
		c.Action, c.Choice = "silence", choice
		return c, value != ""
	}
	switch actionID {
	case ActionUnsilence:
		c.Action = "unsilence"
		return c, value != ""
	case ActionProfileAgain:
		c.Action = "profile"
		return c, value != ""
	}
	return Click{}, false
}

// start runs c after the click is answered, once per interaction.
func (a *actions) start(c Click) {
	if a.redelivered(c, time.Now()) {
		a.log.Info("A redelivered Slack click was ignored.", zap.String("interaction", c.Interaction))
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
		defer cancel()
		a.run(ctx, c)
	}()
}

// redelivered says whether c's interaction was started here within
// retryWindow, and remembers it otherwise.
func (a *actions) redelivered(c Click, now time.Time) bool {
	key := c.Action + "\x00" + c.Interaction + "\x00" + c.User.ID
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, at := range a.recent {
		if now.Sub(at) > retryWindow {
			delete(a.recent, k)
		}
	}
	if _, ok := a.recent[key]; ok {
		return true
	}
	a.recent[key] = now
	return false
}

func (a *actions) run(ctx context.Context, c Click) {
	log := a.log.With(zap.String("action", c.Action), zap.String("value", c.Value), zap.String("user", c.User.ID))
	if ok, why := a.allowed(ctx, c.Action, c.User.ID); !ok {
		a.total.WithLabelValues(c.Action, "refused").Inc()
		log.Warn("Slack action refused.", zap.String("why", why))
		if err := a.taker.Refused(ctx, c, why); err != nil {
			log.Error("The refused Slack action could not be kept with the run.", zap.Error(err))
		}
		a.private(ctx, c, "You may not "+c.Action+" from this thread: "+why+".")
		return
	}
	take := a.taker.Silence
	switch c.Action {
	case "unsilence":
		take = a.taker.Unsilence
	case "profile":
		take = a.taker.ProfileAgain
	}
	res, err := take(ctx, c)
	if err != nil {
		a.total.WithLabelValues(c.Action, "failed").Inc()
		log.Error("Slack action failed: the run store did not keep it.", zap.Error(err))
		a.private(ctx, c, "Nothing was done: autocapture's run store failed ("+err.Error()+"). Try again in a minute.")
		return
	}
	a.total.WithLabelValues(c.Action, res.Result).Inc()
	log.Info("Slack action taken.", zap.String("result", res.Result))
	if res.Private != "" {
		a.private(ctx, c, res.Private)
	}
}

// allowed says whether user may use the thread's action, and why not
// (Unsilence is the Silence action's).
func (a *actions) allowed(ctx context.Context, action, user string) (bool, string) {
	acc := a.access.Silence
	if action == "profile" {
		acc = a.access.Profile
	}
	switch {
	case !acc.Enabled:
		return false, "the action is turned off (notify.slack.actions)"
	case acc.Everyone, slices.Contains(acc.Users, user):
		return true, ""
	}
	for _, g := range acc.UserGroups {
		members, err := a.members(ctx, g)
		if err != nil {
			a.log.Warn("A Slack user group's members could not be read.", zap.String("group", g), zap.Error(err))
			continue
		}
		if slices.Contains(members, user) {
			return true, ""
		}
	}
	return false, "only the users and user groups notify.slack.actions names may"
}

// members reads group's members, cached for groupTTL.
func (a *actions) members(ctx context.Context, group string) ([]string, error) {
	a.mu.Lock()
	m, ok := a.groups[group]
	a.mu.Unlock()
	if ok && time.Since(m.at) < groupTTL {
		return m.users, nil
	}
	users, err := a.api.GetUserGroupMembersContext(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("usergroups.users.list %s: %w", group, err)
	}
	a.mu.Lock()
	a.groups[group] = groupMembers{users: users, at: time.Now()}
	a.mu.Unlock()
	return users, nil
}

// private answers the clicker alone, in the thread.
func (a *actions) private(ctx context.Context, c Click, text string) {
	if _, err := a.api.PostEphemeralContext(ctx, c.Channel, c.User.ID, slack.MsgOptionText(text, false),
		slack.MsgOptionTS(c.MessageTS)); err != nil {
		a.log.Warn("The private answer to a Slack action could not be posted.", zap.Error(err))
	}
}

// Wait waits for the actions started so far (tests, and a clean shutdown).
func (h *Interactions) Wait() {
	if h.actions != nil {
		h.actions.wg.Wait()
	}
}
