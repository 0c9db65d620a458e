package actions

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// bundle is Actions over a migrated store, with the outbox, the runs and
// the profiling guard stood in for.
type bundle struct {
	a      *Actions
	db     *sql.DB
	tables database.Tables
	out    *recOutbox
	runs   *fakeRuns
	guard  *fakeGuard
}

const firstRun = "run-first"

func setup(t *testing.T, db testenv.DB) *bundle {
	t.Helper()
	ctx := context.Background()
	raw, d, drv, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if err := database.Migrate(ctx, raw, d, drv); err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: raw, tables: database.NewTables(d), out: &recOutbox{}, guard: &fakeGuard{}}
	b.runs = &fakeRuns{tables: b.tables, has: true}
	b.insertRun(t, raw, database.NewRun{ID: firstRun, Key: firstRun, Fingerprint: "fp1", Alertname: "VLLMHighTTFT",
		Alert: `{"labels":{"alertname":"VLLMHighTTFT","instance":"127.0.0.1:1"}}`, Status: "succeeded"})
	b.a, err = New(Deps{Store: func() Store { return raw }, Tables: b.tables, Dialect: d, Outbox: b.out,
		Again: b.runs, Guard: b.guard, AMTimeout: time.Second, Log: zaptest.NewLogger(t),
		RunURL: func(id string) string { return "https://ac.example/runs/" + id }})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) insertRun(t *testing.T, q database.RowsQuerier, r database.NewRun) {
	t.Helper()
	r.CreatedAt, r.QueuedAt = time.Now().UnixMilli(), time.Now().UnixMilli()
	if _, err := b.tables.Runs.Insert(context.Background(), q, []database.NewRun{r}); err != nil {
		t.Fatal(err)
	}
}

// orphan writes alice's pending "Profile again" as a process killed right
// after it leaves it: holding the slot, its claim lapsed, no run.
func (b *bundle) orphan(t *testing.T) database.ActionRow {
	t.Helper()
	row := database.ActionRow{ID: "profile/" + firstRun + "/m/1", RunID: firstRun, Kind: KindProfile, Arg: "http://127.0.0.1:1",
		UserID: "U0ALICE", UserName: "alice", Slot: sql.NullString{String: profileSlot(firstRun), Valid: true}}
	if ok, err := b.tables.Actions.Begin(context.Background(), b.db, row, -time.Minute.Milliseconds()); err != nil || !ok {
		t.Fatalf("write the pending row: %v %v", ok, err)
	}
	return row
}

// takes wants c to start a run again, n of them made so far.
func (b *bundle) takes(t *testing.T, c Click, n int) {
	t.Helper()
	if res, err := b.a.ProfileAgain(context.Background(), c); err != nil || res.Result != "done" {
		t.Fatalf("%s's click: %+v %v, want done", c.UserName, res, err)
	}
	if got := len(b.againRuns(t)); got != n {
		t.Fatalf("%d runs again, want %d", got, n)
	}
}

// againRuns are the runs that take a profile again, by key.
func (b *bundle) againRuns(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Query(`SELECT run_key FROM autocapture_runs WHERE run_key LIKE 'again/%' ORDER BY created_at, run_key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// fakeRuns creates a run again as the lifecycle does: a row keyed
// again/<action>, once.
type fakeRuns struct {
	tables database.Tables
	has    bool // the run's playbooks have a profile step
}

func (f *fakeRuns) ProfileStep(_ context.Context, runID string) (vocab.LeaseRequest, bool, error) {
	return vocab.LeaseRequest{Target: "http://127.0.0.1:1", Cooldown: time.Minute}, f.has, nil
}

func (f *fakeRuns) Again(ctx context.Context, tx *sql.Tx, runID, actionID string) (string, error) {
	if id, err := f.tables.Runs.ByKey(ctx, tx, AgainKey(actionID)); err == nil {
		return id, nil
	}
	id := "again-" + actionID[strings.LastIndex(actionID, "/")+1:]
	now := time.Now().UnixMilli()
	_, err := f.tables.Runs.Insert(ctx, tx, []database.NewRun{{ID: id, Key: AgainKey(actionID), Fingerprint: AgainKey(actionID),
		Alertname: "VLLMHighTTFT", Alert: "{}", Status: "queued", CreatedAt: now, QueuedAt: now}})
	return id, err
}

type fakeGuard struct {
	mu      sync.Mutex
	refusal *vocab.ProfileRefusal
	asked   int
}

func (g *fakeGuard) Peek(context.Context, vocab.LeaseRequest) (*vocab.ProfileRefusal, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	return g.refusal, nil
}

type recOutbox struct {
	mu  sync.Mutex
	ops []string // "<run> <key>"
}

func (o *recOutbox) Append(_ context.Context, _ *sql.Tx, runID string, ops ...outbox.Op) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range ops {
		o.ops = append(o.ops, runID+" "+op.Key())
	}
	return nil
}

func (o *recOutbox) replies() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, s := range o.ops {
		if strings.Contains(s, " action/") {
			out = append(out, s)
		}
	}
	return out
}

var (
	alice = Click{RunID: firstRun, UserID: "U0ALICE", UserName: "alice"}
	bob   = Click{RunID: firstRun, UserID: "U0BOB", UserName: "bob"}
)

func as(c Click, interaction string) Click { c.Interaction = interaction; return c }

// TestProfileAgain: a click takes the profile again once, whatever repeats
// it or dies mid-way; a refusal says which guard; on SQLite and PostgreSQL,
// a fresh database per behaviour.
func TestProfileAgain(t *testing.T) {
	ctx := context.Background()
	run := func(name string, f func(t *testing.T, db testenv.DB)) {
		t.Run(name, func(t *testing.T) { testenv.ForEachDB(t, f) })
	}
	run("a double click and a retry make one run and no reply yet", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		res, err := b.a.ProfileAgain(ctx, as(alice, "m/1"))
		if err != nil || res.Result != "done" || !strings.Contains(res.Private, "127.0.0.1:1") {
			t.Fatalf("first click: %+v %v, want done, naming the target", res, err)
		}
		again, err := b.a.ProfileAgain(ctx, as(bob, "m/2"))
		if err != nil || again.Result != "already" || !strings.Contains(again.Private, "asked by alice (U0ALICE)") {
			t.Fatalf("bob's click: %+v %v, want already profiling, asked by alice", again, err)
		}
		retry, err := b.a.ProfileAgain(ctx, as(alice, "m/1"))
		if err != nil || retry.Result != "already" || retry.Private != "" {
			t.Fatalf("Slack's retry: %+v %v, want already, said nothing more", retry, err)
		}
		if keys := b.againRuns(t); len(keys) != 1 || keys[0] != AgainKey("profile/"+firstRun+"/m/1") {
			t.Fatalf("runs again %v, want alice's one", keys)
		}
		if r := b.out.replies(); len(r) != 0 {
			t.Fatalf("replies %v, want none until the run ends", r)
		}
	})
	run("a guard's refusal is answered at once and in the thread, and frees the slot", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		b.guard.refusal = &vocab.ProfileRefusal{Reason: vocab.RefusedCooldown,
			Detail: "http://127.0.0.1:1 was profiled at 10:12, cooldown 30m: next from 10:42"}
		res, err := b.a.ProfileAgain(ctx, as(alice, "m/1"))
		if err != nil || res.Result != "guard" || !strings.Contains(res.Private, "cooldown holds") || !strings.Contains(res.Private, "next from 10:42") {
			t.Fatalf("click: %+v %v, want the cooldown named with when it frees", res, err)
		}
		if r := b.out.replies(); len(r) != 1 || r[0] != firstRun+" action/profile/"+firstRun+"/m/1" {
			t.Fatalf("replies %v, want one in the first run's thread", r)
		}
		rep, err := b.a.ActionReply(ctx, firstRun, "action/x", "profile/"+firstRun+"/m/1", false)
		if err != nil || !strings.Contains(rep.Notice, "not profiled") || !strings.Contains(rep.Notice, "next from 10:42") {
			t.Fatalf("reply %+v %v, want the refusal in words", rep, err)
		}
		b.guard.refusal = nil
		b.takes(t, as(bob, "m/2"), 1) // once it freed
	})
	run("a kill between the row and the run: the sweep makes the one run", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		row := b.orphan(t)
		if res, err := b.a.ProfileAgain(ctx, as(bob, "m/2")); err != nil || res.Result != "done" {
			t.Fatalf("bob's click on the stale row: %+v %v, want alice's resumed", res, err)
		}
		b.a.sweepOnce(ctx)
		if keys := b.againRuns(t); len(keys) != 1 || keys[0] != AgainKey(row.ID) {
			t.Fatalf("runs again %v, want alice's one", keys)
		}
		got, _ := b.tables.Actions.Get(ctx, b.db, row.ID)
		if got.State != database.ActionDone || !got.Slot.Valid {
			t.Fatalf("alice's row %+v, want done, holding the slot while its run is in flight", got)
		}
	})
	run("a resumed row whose run exists creates none", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		row := b.orphan(t)
		tx, _ := b.db.BeginTx(ctx, nil)
		if _, err := b.runs.Again(ctx, tx, firstRun, row.ID); err != nil {
			t.Fatal(err)
		}
		tx.Commit() // the run's key is the action's: a resume finds it
		b.a.sweepOnce(ctx)
		if keys := b.againRuns(t); len(keys) != 1 {
			t.Fatalf("runs again %v, want one", keys)
		}
	})
	run("a run that ended frees the slot for the next click", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		b.a.ProfileAgain(ctx, as(alice, "m/1"))
		// The run ended without freeing its slot (failed unreadable): the next click heals it.
		if _, err := b.db.Exec(`UPDATE autocapture_runs SET status = 'failed', finished_at = 1 WHERE run_key LIKE 'again/%'`); err != nil {
			t.Fatal(err)
		}
		b.takes(t, as(bob, "m/2"), 2)
	})
	run("a run without a profile step offers nothing", func(t *testing.T, db testenv.DB) {
		b := setup(t, db)
		b.runs.has = false
		res, err := b.a.ProfileAgain(ctx, as(alice, "m/1"))
		if err != nil || res.Result != "failed" || !strings.Contains(res.Private, "no profile step") || b.guard.asked != 0 {
			t.Fatalf("click: %+v %v (guard asked %d), want nothing taken", res, err, b.guard.asked)
		}
	})
}

// TestProfileAgainReply: the reply compares the new capture with the first
// and with the baseline, family by family, with the idle share, the top
// kernels (as the trace named them, untrusted) and links to both runs and
// reports; a capture the guard refused at run time says which guard.
func TestProfileAgainReply(t *testing.T) {
	b := setup(t, testenv.DB{Path: t.TempDir() + "/a.db"})
	ctx := context.Background()
	b.a.d.ReportLink = func(_ context.Context, runID string, a vocab.Artifact) (notify.Link, bool) {
		return notify.Link{Name: a.Name, URL: "https://s3.example/" + a.Key}, true
	}
	if res, err := b.a.ProfileAgain(ctx, as(alice, "m/1")); err != nil || res.Result != "done" {
		t.Fatalf("click: %+v %v", res, err)
	}
	actionID := "profile/" + firstRun + "/m/1"
	againID, _ := b.tables.Runs.ByKey(ctx, b.db, AgainKey(actionID))
	base := &vocab.BaselineRef{RunID: "run-healthy", TakenAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Baseline: true}
	addProfile(t, b, firstRun, executor.StepRecord{Status: "succeeded", Profile: &vocab.ProfileFinding{Family: "gemm", Share: 0.62,
		Shares: map[string]float64{"gemm": 0.62, "attention": 0.20, "other": 0.18}, IdleShare: 0.10, TopKernel: "ampere_sgemm_128x64",
		TopKernelShare: 0.40, HasBaseline: true, Baseline: base, BaselineShare: 0.38,
		Shift:  []vocab.FamilyShift{{Family: "gemm", Share: 0.62, Baseline: 0.38}, {Family: "attention", Share: 0.20, Baseline: 0.44}},
		Report: "first/profile-report.json"}, Artifacts: []vocab.Artifact{{Name: "profile-report.json", Key: "first/profile-report.json"}}})
	addProfile(t, b, againID, executor.StepRecord{Status: "succeeded", Profile: &vocab.ProfileFinding{Family: "gemm", Share: 0.81,
		Shares: map[string]float64{"gemm": 0.81, "attention": 0.09, "other": 0.10}, IdleShare: 0.12, TopKernel: "<!here> evil_kernel",
		TopKernelShare: 0.61, Report: "again/profile-report.json"},
		Artifacts: []vocab.Artifact{{Name: "profile-report.json", Key: "again/profile-report.json"}}})
	rep, err := b.a.ActionReply(ctx, firstRun, "action/"+actionID, actionID, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"alice (U0ALICE) asked to profile http://127.0.0.1:1 again", "GEMM 81% of GPU time now",
		"62% in the first capture", "38% in the baseline"} {
		if !strings.Contains(rep.Notice, want) {
			t.Errorf("notice %q lacks %q", rep.Notice, want)
		}
	}
	for _, want := range []string{"GEMM: 81% now · 62% first · 38% baseline", "attention: 9% now · 20% first · 44% baseline",
		"GPU idle: 12% now · 10% first", "top kernel now: <!here> evil_kernel 61% · first: ampere_sgemm_128x64 40%", "baseline: run run-healthy"} {
		if !strings.Contains(rep.Summary, want) {
			t.Errorf("summary %q lacks %q", rep.Summary, want)
		}
	}
	var links []string
	for _, l := range rep.Links {
		links = append(links, l.Name+"="+l.URL)
	}
	if got := strings.Join(links, " "); got != "Run now=https://ac.example/runs/"+againID+" Run first=https://ac.example/runs/"+firstRun+
		" Report now=https://s3.example/again/profile-report.json Report first=https://s3.example/first/profile-report.json" {
		t.Errorf("links %s, want both runs and both reports", got)
	}

	// The run's own Acquire refused (the budget went meanwhile): the reply says which guard.
	b.db.Exec(`DELETE FROM autocapture_steps WHERE run_id = $1`, againID)
	addProfile(t, b, againID, executor.StepRecord{Status: "skipped", Reason: "budget: 4 captures started in the last hour and 0 about to: " +
		"profiling.max_per_hour is 4; next slot from 2026-12-06T10:42:00.000Z", Findings: map[string]any{"refused": "budget"}})
	rep, err = b.a.ActionReply(ctx, firstRun, "action/"+actionID, actionID, false)
	if err != nil || !strings.Contains(rep.Notice, "the profiling budget is spent") || !strings.Contains(rep.Notice, "next slot from 2026-12-06T10:42") {
		t.Fatalf("reply %q %v, want the budget named with its next slot", rep.Notice, err)
	}
}

func addProfile(t *testing.T, b *bundle, runID string, rec executor.StepRecord) {
	t.Helper()
	rec.Plan, rec.ID, rec.Kind, rec.Tier = "vllm-high-ttft", "profile", "profile", vocab.TierProfile
	raw, _ := json.Marshal(rec)
	if err := b.tables.Steps.Add(context.Background(), b.db, database.Step{RunID: runID, Plan: rec.Plan, ID: rec.ID, Kind: rec.Kind,
		Status: rec.Status, FinishedAt: time.Now().UnixMilli(), Record: string(raw)}); err != nil {
		t.Fatal(err)
	}
}
