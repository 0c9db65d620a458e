package grouping

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
)

// TestChannelRouting: the alert's routing label wins over a playbook's
// notify.channel; else the first plan naming one; else the default ("").
func TestChannelRouting(t *testing.T) {
	g := &Grouper{channelLabel: "slack_channel"}
	plans := []*playbooks.Plan{{Playbook: "a"}, {Playbook: "b", Channel: "C0VLLMTEAM"}, {Playbook: "c", Channel: "C0OTHER"}}
	routed := template.Alert{Labels: template.KV{"slack_channel": "C0PLATFORM"}}
	plain := template.Alert{Labels: template.KV{"alertname": "X"}}
	for _, c := range []struct {
		name  string
		a     template.Alert
		plans []*playbooks.Plan
		want  string
	}{
		{"routing label", routed, plans, "C0PLATFORM"},
		{"first playbook naming one", plain, plans, "C0VLLMTEAM"},
		{"default", plain, plans[:1], ""},
	} {
		if got := g.Channel(c.a, c.plans); got != c.want {
			t.Errorf("%s: channel %q, want %q", c.name, got, c.want)
		}
	}
	if got := (&Grouper{}).Channel(routed, plans); got != "C0VLLMTEAM" {
		t.Errorf("without channel_label: %q, want the playbook's C0VLLMTEAM", got)
	}
}

// TestFleetKey: a fleet is an alert naming its model and instance, keyed by
// alertname, model and channel.
func TestFleetKey(t *testing.T) {
	a := fleetAlert("fp", "llama-70b", 1, time.Now())
	if !fleetCandidate(a) {
		t.Fatal("an alert with model_name and instance is no fleet candidate")
	}
	b := fleetAlert("fp2", "llama-70b", 2, time.Now())
	if fleetKey(a, "C1") != fleetKey(b, "C1") || fleetKey(a, "C1") == fleetKey(a, "C2") {
		t.Errorf("fleet keys: two instances of a model differ, or two channels are one")
	}
	delete(a.Labels, "model_name")
	if fleetCandidate(a) {
		t.Error("an alert without model_name is a fleet candidate")
	}
}

// TestStormGroupsTheAcceptedRuns: more than notify.storm.threshold runs of
// one Accept whose alerts match a playbook are one group, led by the first,
// its parent recorded in the Accept's transaction; an alert no playbook
// matches joins none.
func TestStormGroupsTheAcceptedRuns(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		p := planner{plans: func(a template.Alert) []*playbooks.Plan {
			if a.Labels["nomatch"] != "" {
				return nil
			}
			return []*playbooks.Plan{{Playbook: "pb", Channel: "C0STORM"}}
		}}
		h := newHarness(t, db, p, func(d *Deps) { d.Storm = config.Storm{Threshold: 2, Window: time.Minute} })
		now := time.Now().UTC()
		var alerts []template.Alert
		for i := range 4 {
			alerts = append(alerts, fleetAlert(fmt.Sprintf("storm%d", i), "m", i, now))
		}
		alerts[3].Labels["nomatch"] = "yes"
		var created map[int]string
		h.inTx(t, func(tx *sql.Tx) error {
			created = h.insertRuns(t, tx, "storm", alerts, now)
			return h.g.Assign(context.Background(), tx, alerts, created, now)
		})
		lead := created[0]
		for i := range 3 {
			if got := h.leadOf(t, created[i]); got != lead {
				t.Errorf("run %s in group %q, want %s's", created[i], got, lead)
			}
		}
		if got := h.leadOf(t, created[3]); got != "" {
			t.Errorf("the unmatched alert's run is in group %s", got)
		}
		ops := h.out.recorded()
		if len(ops) != 1 || ops[0].to != lead || !ops[0].group || ops[0].op != (outbox.Open{Channel: "C0STORM"}) {
			t.Errorf("recorded %+v, want the storm's parent alone, in %s's thread on C0STORM", ops, lead)
		}
		grp, err := h.g.ShownGroup(context.Background(), lead)
		if err != nil || grp == nil || grp.Kind != notify.GroupStorm || len(grp.Members) != 3 || grp.Members[0].RunID != lead {
			t.Fatalf("shown group %+v (%v), want a storm of 3 led by %s", grp, err, lead)
		}
	})
}

// TestFleetJoinsAcrossAccepts: a fleet candidate opens a fleet it leads (its
// parent recorded), the next alert of the model within notify.storm.window
// joins it (an edit of the lead's parent); a fleet shows as a group once it
// has more than its lead.
func TestFleetJoinsAcrossAccepts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		h := newHarness(t, db, onePlan(nil), func(d *Deps) { d.Storm = config.Storm{Threshold: 10, Window: time.Minute} })
		ctx := context.Background()
		now := time.Now().UTC()
		var first, second map[int]string
		h.inTx(t, func(tx *sql.Tx) error {
			a := []template.Alert{fleetAlert("f0", "llama-70b", 0, now)}
			first = h.insertRuns(t, tx, "fleetA", a, now)
			return h.g.Assign(ctx, tx, a, first, now)
		})
		lead := first[0]
		if grp, err := h.g.ShownGroup(ctx, lead); err != nil || grp != nil {
			t.Fatalf("a fleet of one shows %+v (%v), want no group", grp, err)
		}
		h.inTx(t, func(tx *sql.Tx) error {
			a := []template.Alert{fleetAlert("f1", "llama-70b", 1, now)}
			second = h.insertRuns(t, tx, "fleetB", a, now.Add(time.Second))
			return h.g.Assign(ctx, tx, a, second, now.Add(time.Second))
		})
		if got := h.leadOf(t, second[0]); got != lead {
			t.Errorf("second alert's run in group %q, want the fleet of %s", got, lead)
		}
		want := []recOp{{to: lead, group: true, op: outbox.Open{}},
			{to: lead, group: true, op: outbox.GroupEdit{Member: second[0], Change: outbox.MemberJoined}}}
		if got := h.out.recorded(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("recorded %+v, want %+v", got, want)
		}
		grp, err := h.g.ShownGroup(ctx, lead)
		if err != nil || grp == nil || grp.Kind != notify.GroupFleet || len(grp.Members) != 2 || grp.Model != "llama-70b" {
			t.Fatalf("shown group %+v (%v), want a fleet of llama-70b with 2 members", grp, err)
		}
	})
}

// TestAdmitOneOfConcurrentClaims: runs admitted at once in their own
// transactions reach one playbook cooldown; exactly one takes it, every other
// is skipped naming it, with its repeat recorded in the holder's thread. A
// claim rolled back with its transaction holds nothing.
func TestAdmitOneOfConcurrentClaims(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		h := newHarness(t, db, onePlan(nil))
		ctx := context.Background()
		p := &playbooks.Plan{Playbook: "pb", Cooldown: time.Hour, CooldownKey: "pb/127.0.0.1:8000"}

		// Rolled back: the key is free again.
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if why, err := h.g.Admit(ctx, tx, "rolled-back", time.Now(), p); err != nil || why != "" {
			t.Fatalf("first claim: %q, %v", why, err)
		}
		tx.Rollback()

		const n = 6
		whys := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tx, err := h.db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback()
				if whys[i], err = h.g.Admit(ctx, tx, fmt.Sprintf("run-%d", i), time.Now(), p); err != nil {
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		winner := ""
		for i, why := range whys {
			if why == "" {
				if winner != "" {
					t.Fatalf("runs %s and run-%d both took the cooldown", winner, i)
				}
				winner = fmt.Sprintf("run-%d", i)
			}
		}
		if winner == "" {
			t.Fatalf("no run took the cooldown: %q", whys)
		}
		repeats := 0
		for i, why := range whys {
			if id := fmt.Sprintf("run-%d", i); id != winner && !strings.Contains(why, "cooldown: playbook pb ran for run "+winner) {
				t.Errorf("%s skipped for %q, want the cooldown of %s", id, why, winner)
			}
		}
		for _, o := range h.out.recorded() {
			if r, ok := o.op.(outbox.CooldownRepeat); ok && o.to == winner && r.Playbook == "pb" && r.Repeat != winner {
				repeats++
			} else {
				t.Errorf("recorded %+v, want a repeat in %s's thread", o, winner)
			}
		}
		if repeats != n-1 {
			t.Errorf("%d repeats recorded in the holder's thread, want %d", repeats, n-1)
		}
	})
}

// TestStepCooldownIsGivenBack: a step's cooldown key taken by one run skips
// the step in another until the first gives it back (its step did not
// succeed).
func TestStepCooldownIsGivenBack(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		h := newHarness(t, db, onePlan(nil))
		ctx := context.Background()
		st := &playbooks.PlannedStep{ID: "snap", Cooldown: time.Hour, CooldownKey: "snap/127.0.0.1:8000"}
		if why := h.g.StepCooldown(ctx, "a", st); why != "" {
			t.Fatalf("first run skipped: %s", why)
		}
		if why := h.g.StepCooldown(ctx, "a", st); why != "" {
			t.Fatalf("the holder's resume skipped: %s", why)
		}
		if why := h.g.StepCooldown(ctx, "b", st); !strings.Contains(why, "cooldown: step snap ran for run a") {
			t.Fatalf("second run: %q, want skipped by a's cooldown", why)
		}
		h.inTx(t, func(tx *sql.Tx) error { return h.g.ReleaseStep(ctx, tx, st.CooldownKey, "a") })
		if why := h.g.StepCooldown(ctx, "b", st); why != "" {
			t.Fatalf("after a gave the key back, b skipped: %s", why)
		}
	})
}
