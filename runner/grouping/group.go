package grouping

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/template"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// Groups: threads several runs share (notify/group.go says what they show).
// Membership is decided in the Accept transaction that creates the runs
// (Assign):
//
//   - storm: an Accept (one Alertmanager group) that creates more than
//     notify.storm.threshold runs whose alerts match a playbook puts them,
//     per channel, into one group; its first run leads it.
//   - fleet: a new run whose alert has model_name and instance labels claims
//     the key (alertname, model_name, channel) in autocapture_fleets: the
//     first claim, or one older than notify.storm.window, makes the run the
//     lead of a new fleet; any other claim joins the fleet already there.
//     The claim is one upsert on the key, so two replicas accepting alerts
//     of one fleet at once serialize on that row. A window counts from the
//     fleet's first alert, so a burst is never split at a bucket boundary.
//
// A group's thread is its lead's: the lead's outbox and autocapture_threads
// rows, numbered by the group row's outbox_seq (not the lead's run row, so a
// member recording into the lead's outbox never waits on the lead's row
// lock). Its parent is recorded in the same transaction as the group (the
// lead's open). Members' operations are rerouted into it by outbox.Append
// (its routeOps): a member posts no parent and no reply per step; its verdict,
// end and resolution edit the group parent, and its end posts one compact
// reply. A fleet's lead keeps its own replies: its thread was posted before
// it had company. Accept plans each candidate once (Planner.Plan, no I/O) to
// learn its channel; an alert no playbook matches joins no group.

// A group's thread operations are outbox.GroupEdit and outbox.MemberReply (runner/outbox).

// stormSettings are notify.storm, with the defaults.
func (g *Grouper) stormSettings() (threshold int, window time.Duration) {
	st := g.storm
	if st.Threshold <= 0 && st.Window == 0 {
		d := defaultStorm()
		return d.Threshold, d.Window
	}
	return max(st.Threshold, 1), st.Window
}

// Assign puts the runs an Accept created into groups, in its transaction
// tx: a storm when there are more than the threshold, else each fleet
// candidate into its fleet. created maps the alert's index to its new run.
// Rows are touched in a fixed order (storm channels sorted, fleet keys
// sorted) so concurrent Accepts wait instead of deadlocking.
func (g *Grouper) Assign(ctx context.Context, tx *sql.Tx, alerts []template.Alert, created map[int]string, now time.Time) error {
	if len(g.out.Sinks()) == 0 || len(created) == 0 {
		return nil // no thread is recorded anywhere
	}
	threshold, window := g.stormSettings()
	idx := make([]int, 0, len(created))
	for i := range created {
		idx = append(idx, i)
	}
	sort.Ints(idx) // the webhook's order
	type cand struct {
		i           int
		id, channel string
	}
	var rest []cand
	if len(created) > threshold {
		byCh := map[string][]cand{}
		for _, i := range idx {
			if ch, ok := g.channelFor(ctx, tx, alerts[i], now); ok {
				byCh[ch] = append(byCh[ch], cand{i, created[i], ch})
			}
		}
		matched := 0
		for _, l := range byCh {
			matched += len(l)
		}
		chans := make([]string, 0, len(byCh))
		for ch := range byCh {
			chans = append(chans, ch)
		}
		sort.Strings(chans)
		for _, ch := range chans {
			l := byCh[ch]
			if matched <= threshold || len(l) < 2 {
				rest = append(rest, l...)
				continue
			}
			ids := make([]string, len(l))
			for j, c := range l {
				ids[j] = c.id
			}
			if err := g.openGroup(ctx, tx, notify.GroupStorm, ch, now, ids); err != nil {
				return err
			}
			g.log.Info("Alert storm: one thread for the group's runs.", zap.Int("runs", len(ids)),
				zap.String("lead", ids[0]), zap.String("channel", ch))
		}
	} else {
		for _, i := range idx {
			if fleetCandidate(alerts[i]) && window > 0 {
				if ch, ok := g.channelFor(ctx, tx, alerts[i], now); ok {
					rest = append(rest, cand{i, created[i], ch})
				}
			}
		}
	}
	if window <= 0 {
		return nil
	}
	type claim struct {
		key string
		c   cand
	}
	var claims []claim
	for _, c := range rest {
		if a := alerts[c.i]; fleetCandidate(a) {
			claims = append(claims, claim{fleetKey(a, c.channel), c})
		}
	}
	sort.Slice(claims, func(x, y int) bool {
		if claims[x].key != claims[y].key {
			return claims[x].key < claims[y].key
		}
		return claims[x].c.id < claims[y].c.id
	})
	for _, cl := range claims {
		if err := g.joinFleet(ctx, tx, cl.key, cl.c.id, cl.c.channel, now, window); err != nil {
			return err
		}
	}
	return nil
}

// fleetCandidate: an alert naming its model and instance can be one of a fleet.
func fleetCandidate(a template.Alert) bool {
	return a.Labels["model_name"] != "" && a.Labels["instance"] != ""
}

// fleetKey is the fleet an alert belongs to: alertname, model, channel.
func fleetKey(a template.Alert, channel string) string {
	return strings.Join([]string{a.Labels["alertname"], a.Labels["model_name"], channel}, "\x1f")
}

// channelFor is the channel the alert's thread would go to (the first
// matched playbook naming one; "" the notifier's default), and false when no
// playbook would run for it: none matches, or every one that does is inside
// its cooldown now (the run will be skipped, and a skipped run posts nothing,
// so it must neither open a fleet's thread nor count toward a storm). That
// read is not the claim (the run takes its cooldown when it starts): an
// alert accepted in the same moment as the one that is about to take the
// key still joins, and its line then says "skipped".
func (g *Grouper) channelFor(ctx context.Context, q database.RowQuerier, a template.Alert, now time.Time) (string, bool) {
	plans, err := g.planner.Plan(a, vocab.AlertWindow(a.StartsAt, g.lookback, now.UTC()))
	if err != nil || len(plans) == 0 {
		return "", false
	}
	var run []*playbooks.Plan
	for _, p := range plans {
		if !g.coolingDown(ctx, q, p) {
			run = append(run, p)
		}
	}
	if len(run) == 0 {
		return "", false
	}
	return g.Channel(a, run), true
}

// coolingDown says whether plan p's cooldown key was taken by a run within
// its cooldown, on the database's clock. An error reads as not cooling down
// (the run then groups as before cooldowns were considered).
func (g *Grouper) coolingDown(ctx context.Context, q database.RowQuerier, p *playbooks.Plan) bool {
	if p.Cooldown <= 0 || p.CooldownKey == "" {
		return false
	}
	n, err := g.tables.Cooldowns.Recent(ctx, q, string(scopePlaybook), p.CooldownKey, p.Cooldown.Milliseconds())
	return err == nil && n > 0
}

// groupIDChunk bounds the ids of one UPDATE … IN (…).
const groupIDChunk = 100

// openGroup creates a group led by ids[0] with ids as members and records its
// parent (the lead's open) in tx: a kill -9 leaves the group and its parent's
// operation, or neither.
func (g *Grouper) openGroup(ctx context.Context, tx *sql.Tx, kind, channel string, now time.Time, ids []string) error {
	lead := ids[0]
	if err := g.tables.Groups.Open(ctx, tx, lead, kind, channel, toMS(now)); err != nil {
		return fmt.Errorf("open %s group of %s: %w", kind, lead, err)
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), groupIDChunk)]
		ids = ids[len(chunk):]
		if err := g.tables.Groups.Join(ctx, tx, lead, chunk); err != nil {
			return fmt.Errorf("open %s group of %s: members: %w", kind, lead, err)
		}
	}
	return g.out.AppendGroup(ctx, tx, lead, outbox.Open{Channel: channel})
}

// joinFleet claims the fleet key for run id: a new fleet it leads, or the
// open one it joins (its line appears in the parent with the edit recorded
// here).
func (g *Grouper) joinFleet(ctx context.Context, tx *sql.Tx, key, id, channel string, now time.Time, window time.Duration) error {
	err := g.tables.Groups.ClaimFleet(ctx, tx, key, id, toMS(now), toMS(now.Add(-window)))
	if err == nil {
		return g.openGroup(ctx, tx, notify.GroupFleet, channel, now, []string{id})
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("claim fleet: %w", err)
	}
	// The key is held by a fleet opened within the window (the row is locked
	// by the claim until this transaction ends).
	lead, kind, err := g.tables.Groups.Fleet(ctx, tx, key)
	if err != nil {
		return fmt.Errorf("claim fleet: %w", err)
	}
	if kind == "" { // its lead was deleted: this run starts the fleet again
		if err := g.tables.Groups.RestartFleet(ctx, tx, key, id, toMS(now)); err != nil {
			return fmt.Errorf("claim fleet: %w", err)
		}
		return g.openGroup(ctx, tx, notify.GroupFleet, channel, now, []string{id})
	}
	if err := g.tables.Groups.JoinOne(ctx, tx, lead, id); err != nil {
		return fmt.Errorf("join fleet of %s: %w", lead, err)
	}
	return g.out.AppendGroup(ctx, tx, lead, outbox.GroupEdit{Member: id, Change: outbox.MemberJoined})
}

func defaultStorm() config.Storm { return config.Default().Notify.Storm }
