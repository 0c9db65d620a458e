package database

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// TestActionsOneLiveSilencePerRun: the first click takes the run's slot, a
// second click (another interaction) is refused it, a retry of the first is
// refused by its id; a failure frees the slot; a claim is taken only once
// it lapses.
func TestActionsOneLiveSilencePerRun(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *sql.DB, tb Tables) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `INSERT INTO autocapture_runs (id, run_key, fingerprint, alertname, alert,
			starts_at, status, created_at, queued_at) VALUES ('r1', 'k1', 'f', 'A', '{}', 0, 'running', 0, 0)`); err != nil {
			t.Fatal(err)
		}
		a := tb.Actions
		row := func(id string) ActionRow {
			return ActionRow{ID: id, RunID: "r1", Kind: "silence", Arg: "1h", UserID: "U1", UserName: "alice",
				Slot: sql.NullString{String: "r1", Valid: true}}
		}
		begin := func(r ActionRow, claim int64) bool {
			t.Helper()
			ok, err := a.Begin(ctx, db, r, claim)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !begin(row("c1"), 60_000) || begin(row("c1"), 60_000) || begin(row("c2"), 60_000) {
			t.Fatal("want the first click written, its retry and a second click refused")
		}
		if got, ok, err := a.BySlot(ctx, db, "r1"); err != nil || !ok || got.ID != "c1" || got.State != ActionPending {
			t.Fatalf("slot holder: %+v %v %v", got, ok, err)
		}
		if ok, _ := a.Claim(ctx, db, "c1", 60_000); ok {
			t.Fatal("claimed an action whose claim has not lapsed")
		}
		if ok, _ := a.Finish(ctx, db, "c1", ActionFailed, "", "Alertmanager down"); !ok {
			t.Fatal("finish refused")
		}
		if ok, _ := a.Finish(ctx, db, "c1", ActionDone, "sid", ""); ok {
			t.Fatal("finished twice")
		}
		if !begin(row("c3"), -1) {
			t.Fatal("a failed action kept the slot")
		}
		if ok, _ := a.Claim(ctx, db, "c3", 60_000); !ok {
			t.Fatal("a lapsed claim was not taken")
		}
		if stale, err := a.Stale(ctx, db, 10); err != nil || len(stale) != 0 {
			t.Fatalf("stale after the claim: %v %v", stale, err)
		}
		if ok, _ := a.Finish(ctx, db, "c3", ActionDone, "sid-3", ""); !ok {
			t.Fatal("finish c3")
		}
		list, err := a.List(ctx, db, "r1")
		if err != nil || len(list) != 2 || list[1].SilenceID.String != "sid-3" || !list[1].Slot.Valid || list[0].Slot.Valid {
			t.Fatalf("list: %+v %v", list, err)
		}
		if ok := begin(ActionRow{ID: "x", RunID: "nope", Kind: "silence", UserID: "U1"}, 1); ok {
			t.Fatal("an action on no run was written")
		}
	})
}

// TestSeenBeforeByInstanceOrModel: the earlier runs of the same alert on
// the same instance or model within the window, newest first, each once;
// not the run itself, another alert, or a run outside the window.
func TestSeenBeforeByInstanceOrModel(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *sql.DB, tb Tables) {
		ctx := context.Background()
		for _, r := range []struct {
			id, alertname, inst, model string
			at                         int64
		}{
			{"now", "A", "i1", "m1", 1000}, {"both", "A", "i1", "m1", 900}, {"inst", "A", "i1", "m2", 800},
			{"model", "A", "i2", "m1", 700}, {"neither", "A", "i2", "m2", 600}, {"other", "B", "i1", "m1", 500},
			{"old", "A", "i1", "m1", 10}, {"nomodel", "A", "i3", "", 650},
		} {
			alert := `{"labels":{"alertname":"` + r.alertname + `","instance":"` + r.inst + `","model_name":"` + r.model + `"}}`
			if _, err := tb.Runs.Insert(ctx, db, []NewRun{{ID: r.id, Key: r.id, Fingerprint: r.id, Alertname: r.alertname,
				Alert: alert, Status: "succeeded", CreatedAt: r.at, QueuedAt: r.at, Instance: r.inst, Model: r.model}}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `UPDATE autocapture_runs SET verdict = '{"id":"kv-pressure"}' WHERE id = $1`, r.id); err != nil {
				t.Fatal(err)
			}
		}
		got, err := tb.Seen.List(ctx, db, SeenFilter{Alertname: "A", Instance: "i1", Model: "m1", Since: 100, Before: 1001, Exclude: "now", Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != "both,inst,model" || got[1].Instance != "i1" || got[1].Model != "m2" || got[0].Verdict == "" {
			t.Fatalf("seen %+v, want both, inst, model with their labels and verdicts", got)
		}
		if got, _ := tb.Seen.List(ctx, db, SeenFilter{Alertname: "A", Instance: "i3", Since: 0, Before: 2000, Limit: 50}); len(got) != 1 || got[0].ID != "nomodel" {
			t.Fatalf("by instance alone: %+v, want nomodel (an empty model matches none)", got)
		}
	})
}
