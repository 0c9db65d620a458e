// Package slack tells a run's story in a Slack thread: the parent when the
// run opens (then led by the verdict), one reply per finished step with its
// charts uploaded, and the outcome when the run ends or its alert resolves.
// Its inbound side is Interactions, the endpoint Slack posts a click on the
// verdict's right/wrong buttons to (verified with the signing secret,
// recorded through a FeedbackRecorder); handlers mounts it.
//
// Every message carries metadata (EventType, the run id, the operation key),
// so a retried operation asks Slack what an earlier attempt posted instead of
// posting twice. Retries are the outbox's: the client never retries by
// itself, and a 429 comes back as *notify.RateLimitedError.
package slack

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/notify"
)

// ArtifactReader reads a stored artifact's bytes (a chart to upload).
type ArtifactReader interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// Notifier posts run threads to Slack.
type Notifier struct {
	api         *slack.Client
	token       string
	channel     string
	postSkipped bool
	// feedback: interactivity is configured (a signing secret), so a verdict
	// carries the right/wrong buttons POST /hooks/slack/interactions takes.
	feedback    bool
	silence     bool // the Silence action is on: the parent offers it
	profile     bool // Profile again is on: a parent of a run with a profile step offers it
	grafana     *template.Template
	externalURL string
	pages       PageSigner    // nil: the "Run page" link carries no token
	pageTTL     time.Duration // a page link's lifetime from each delivery
	store       ArtifactReader
	log         *zap.Logger
	pace        *pacer
	now         func() time.Time

	mu  sync.Mutex
	ids map[string]string // channel name → id, learned from posts and conversations.list
}

var _ notify.Notifier = (*Notifier)(nil)

// Option changes how New builds a Notifier.
type Option func(*Notifier, *[]slack.Option)

// WithExternalURL links the parent to the run's page on the daemon
// (web.external_url + /runs/<id>, "Run page") and to the run in its API
// (+ /api/v1/runs/<id>, "Run"); empty adds no link.
func WithExternalURL(u string) Option {
	return func(n *Notifier, _ *[]slack.Option) { n.externalURL = strings.TrimSuffix(u, "/") }
}

// PageSigner signs a link that opens one run's page, and nothing else,
// without the API's credentials (*links.Signer).
type PageSigner interface {
	SignPage(runID string, exp time.Time) url.Values
}

// WithRunPageLinks signs the parent's "Run page" link with s, valid ttl
// (web.link_ttl) from each delivery: a reader's browser cannot send the
// API's bearer token, so an unsigned link answers 401. The token is made
// when the parent is posted and again at each edit (every edit re-renders
// the parent, so the button always carries a link as fresh as the thread's
// last update); it is never stored, in the database or in the message's
// metadata.
func WithRunPageLinks(s PageSigner, ttl time.Duration) Option {
	return func(n *Notifier, _ *[]slack.Option) { n.pages, n.pageTTL = s, ttl }
}

// New returns a notifier for cfg; store reads the files replies attach.
func New(cfg config.Slack, store ArtifactReader, log *zap.Logger, opts ...Option) (*Notifier, error) {
	if cfg.Token.Reveal() == "" || cfg.Channel == "" {
		return nil, fmt.Errorf("slack: a token and a channel are required")
	}
	api := cfg.APIURL
	if api == "" {
		api = config.DefaultSlackAPIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	grafana, err := cfg.GrafanaTemplate()
	if err != nil {
		return nil, fmt.Errorf("slack: grafana_url: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	n := &Notifier{token: cfg.Token.Reveal(), channel: cfg.Channel, postSkipped: cfg.PostSkipped,
		feedback: cfg.Interactive(), silence: cfg.Interactive() && cfg.Actions.Silence.Enabled,
		profile: cfg.Interactive() && cfg.Actions.Profile.Enabled, grafana: grafana, store: store, log: log.Named("slack"), now: time.Now, ids: map[string]string{}}
	// No slack.OptionRetry: the outbox retries, with the operation's key.
	sopts := []slack.Option{slack.OptionAPIURL(api)}
	for _, o := range opts {
		o(n, &sopts)
	}
	perSecond, burst := cfg.Pace.PerSecond, cfg.Pace.Burst
	if perSecond <= 0 {
		perSecond = 1
	}
	if burst < 1 {
		burst = 1
	}
	n.pace = newPacer(perSecond, burst, n.now)
	n.api = slack.New(n.token, sopts...)
	return n, nil
}

// Open posts the parent, or with run.Retry first finds the one an earlier
// attempt posted (conversations.history, by run id) and returns that.
func (n *Notifier) Open(ctx context.Context, run notify.RunInfo) (notify.Thread, error) {
	ch := run.Channel
	if ch == "" {
		ch = n.channel
	}
	log := n.log.With(zap.String("run", run.ID), zap.String("channel", ch))
	if run.Retry {
		th, ok, err := n.findParent(ctx, ch, run)
		if err != nil {
			return notify.Thread{}, err
		}
		if ok {
			log.Info("Found the run's parent an earlier attempt posted; not posting it again.", zap.String("ts", th.TS))
			return th, nil
		}
	}
	p := n.parentOf(run, log)
	p.AskFeedback, p.AskSilence, p.AskProfile = n.feedback, n.silence, n.profile
	msg := RenderParent(p)
	if run.Group != nil { // the run leads a storm or a fleet: the group's parent
		msg = RenderGroupParent(*run.Group, p)
	}
	if err := n.pace.waitParent(ctx, n.paceKey(ch)); err != nil {
		return notify.Thread{}, n.fail(err, "post the parent of run %s in %s: wait for the pace", run.ID, ch)
	}
	id, ts, err := n.api.PostMessageContext(ctx, ch, n.postOptions(msg, run.ID, notify.KeyOpen, parentPayload(p))...)
	if err != nil {
		return notify.Thread{}, n.fail(err, "chat.postMessage: parent of run %s in %s", run.ID, ch)
	}
	n.learn(ch, id)
	log.Info("Posted the run's parent.", zap.String("ts", ts))
	return notify.Thread{Channel: id, TS: ts}, nil
}

// links are the parent's buttons: the alert's source, the dashboard, the run.
func (n *Notifier) links(run notify.RunInfo, log *zap.Logger) []notify.Link {
	var out []notify.Link
	if u := run.Alert.GeneratorURL; webURL(u) {
		out = append(out, notify.Link{Name: "Alert source", URL: u})
	}
	if n.grafana != nil {
		d := config.NewGrafanaData(run.Alert.Labels, run.Alert.Annotations, run.Alert.StartsAt)
		if u, err := config.RenderGrafanaURL(n.grafana, d); err != nil {
			log.Warn("The Grafana link could not be rendered; the parent goes without it.", zap.Error(err))
		} else {
			out = append(out, notify.Link{Name: "Grafana", URL: u})
		}
	}
	if n.externalURL != "" {
		out = append(out, notify.Link{Name: RunPageLink, URL: n.runPageURL(run.ID)},
			notify.Link{Name: "Run", URL: n.externalURL + "/api/v1/runs/" + url.PathEscape(run.ID)})
	}
	return out
}

// RunPageLink names the parent's button to the run's page.
const RunPageLink = "Run page"

// runPageURL is the run's page under web.external_url, with a page token
// made now when the notifier signs them.
func (n *Notifier) runPageURL(runID string) string {
	u := n.externalURL + "/runs/" + url.PathEscape(runID)
	if n.pages != nil {
		if q := n.pages.SignPage(runID, n.now().Add(n.pageTTL)); len(q) > 0 {
			u += "?" + q.Encode()
		}
	}
	return u
}

// freshLinks re-signs the "Run page" link of a parent read back from its
// metadata, which keeps it without its token.
func (n *Notifier) freshLinks(runID string, links []notify.Link) []notify.Link {
	for i, l := range links {
		if l.Name == RunPageLink && n.externalURL != "" {
			links[i].URL = n.runPageURL(runID)
		}
	}
	return links
}

// msgOptions are a message's blocks, fallback text and metadata, as
// chat.postMessage and chat.update both take them.
func (n *Notifier) msgOptions(m Message, runID, key string, extra map[string]any) []slack.MsgOption {
	return []slack.MsgOption{
		slack.MsgOptionText(m.Text, false),
		slack.MsgOptionBlocks(m.Blocks...),
		slack.MsgOptionMetadata(metadata(runID, key, extra)),
	}
}

// postOptions are msgOptions for a new message, which also turns link
// unfurling off: chat.postMessage takes unfurl_links, chat.update does not
// (https://docs.slack.dev/reference/methods/chat.update), and unfurls are
// made when a message is posted.
func (n *Notifier) postOptions(m Message, runID, key string, extra map[string]any) []slack.MsgOption {
	return append(n.msgOptions(m, runID, key, extra), slack.MsgOptionDisableLinkUnfurl())
}

// pacer spaces posts per channel with one token bucket each: Slack takes
// about one chat.postMessage a second per channel and tolerates short bursts,
// so a storm of runs queues here instead of collecting 429s. Waiters are
// served in order, except that a thread's parent goes ahead of every queued
// reply: in a storm each alert's thread appears first and the evidence fills
// in after.
type pacer struct {
	rate  float64 // tokens a second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens  float64
	last    time.Time
	queue   []*waiter // parents first, then in arrival order
	pumping bool      // a goroutine hands out tokens to the queue
}

// waiter is a post waiting for a token.
type waiter struct {
	parent  bool
	ready   chan struct{}
	granted bool
}

func newPacer(perSecond float64, burst int, now func() time.Time) *pacer {
	return &pacer{rate: perSecond, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// bucketLocked returns channel's bucket, refilled to now. p.mu is held.
func (p *pacer) bucketLocked(channel string) *bucket {
	now := p.now()
	b := p.buckets[channel]
	if b == nil {
		b = &bucket{tokens: p.burst, last: now}
		p.buckets[channel] = b
	}
	b.tokens = min(p.burst, b.tokens+now.Sub(b.last).Seconds()*p.rate)
	b.last = now
	return b
}

// wait blocks until channel may take another reply post, or ctx ends.
func (p *pacer) wait(ctx context.Context, channel string) error { return p.take(ctx, channel, false) }

// waitParent is wait for a thread's parent: it goes ahead of queued replies.
func (p *pacer) waitParent(ctx context.Context, channel string) error {
	return p.take(ctx, channel, true)
}

func (p *pacer) take(ctx context.Context, channel string, parent bool) error {
	p.mu.Lock()
	b := p.bucketLocked(channel)
	if len(b.queue) == 0 && b.tokens >= 1 {
		b.tokens--
		p.mu.Unlock()
		return nil
	}
	w := &waiter{parent: parent, ready: make(chan struct{})}
	at := len(b.queue)
	if parent {
		at = 0
		for at < len(b.queue) && b.queue[at].parent {
			at++
		}
	}
	b.queue = slices.Insert(b.queue, at, w)
	if !b.pumping {
		b.pumping = true
		go p.pump(channel, b)
	}
	p.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		if w.granted { // the token came as ctx ended: give it back
			b.tokens = min(p.burst, b.tokens+1)
		} else if i := slices.Index(b.queue, w); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		p.mu.Unlock()
		return context.Cause(ctx)
	}
}

// pump hands out tokens to channel's queue as they accrue, then ends.
func (p *pacer) pump(channel string, b *bucket) {
	for {
		p.mu.Lock()
		p.bucketLocked(channel)
		for len(b.queue) > 0 && b.tokens >= 1 {
			w := b.queue[0]
			b.queue = b.queue[1:]
			b.tokens--
			w.granted = true
			close(w.ready)
		}
		if len(b.queue) == 0 {
			b.pumping = false
			p.mu.Unlock()
			return
		}
		next := time.Duration((1 - b.tokens) / p.rate * float64(time.Second))
		p.mu.Unlock()
		time.Sleep(max(next, time.Millisecond))
	}
}
