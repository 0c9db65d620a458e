package grouping

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is one process's Grouper on a migrated store, with the outbox and
// the runs it is handed stood in for.
type harness struct {
	g      *Grouper
	db     *sql.DB
	tables database.Tables
	out    *recOutbox
	reg    *prometheus.Registry
}

type depsOpt func(*Deps)

func newHarness(t *testing.T, db testenv.DB, p Planner, opts ...depsOpt) *harness {
	t.Helper()
	ctx := context.Background()
	raw, d, drv, err := database.Open(db.URL, db.Path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { raw.Close() })
	if err := database.Migrate(ctx, raw, d, drv); err != nil {
		t.Fatalf("migrate store: %v", err)
	}
	h := &harness{db: raw, tables: database.NewTables(d), out: &recOutbox{sinks: []string{"default"}}, reg: prometheus.NewRegistry()}
	deps := Deps{DB: raw, Tables: h.tables, Outbox: h.out, Runs: tableRuns{db: raw, tables: h.tables}, Planner: p,
		Lookback: 10 * time.Minute, Owner: "test/1/owner", Log: zaptest.NewLogger(t), Registerer: h.reg}
	for _, f := range opts {
		f(&deps)
	}
	if h.g, err = New(deps); err != nil {
		t.Fatalf("new grouper: %v", err)
	}
	return h
}

// insertRuns stores a queued run per alert, as an Accept does, and returns
// created as Accepted takes it (alert index → run id).
func (h *harness) insertRuns(t *testing.T, tx *sql.Tx, prefix string, alerts []template.Alert, now time.Time) map[int]string {
	t.Helper()
	var rows []database.NewRun
	for i, a := range alerts {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%s-%02d", prefix, i)
		rows = append(rows, database.NewRun{ID: id, Key: id, Fingerprint: a.Fingerprint, Alertname: a.Labels["alertname"],
			Alert: string(b), StartsAt: toMS(a.StartsAt), Status: "queued", CreatedAt: toMS(now) + int64(i), QueuedAt: toMS(now)})
	}
	got, err := h.tables.Runs.Insert(context.Background(), tx, rows)
	if err != nil || len(got) != len(rows) {
		t.Fatalf("insert runs: %d of %d (%v)", len(got), len(rows), err)
	}
	created := map[int]string{}
	for i, r := range rows {
		created[i] = r.ID
	}
	return created
}

// inTx runs f in one transaction and commits it.
func (h *harness) inTx(t *testing.T, f func(tx *sql.Tx) error) {
	t.Helper()
	tx, err := h.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// leadOf is the group run id is a member of ("" none).
func (h *harness) leadOf(t *testing.T, id string) string {
	t.Helper()
	lead, kind, err := h.tables.Groups.Of(context.Background(), h.db, id)
	if err != nil {
		t.Fatalf("group of %s: %v", id, err)
	}
	if !lead.Valid || !kind.Valid {
		return ""
	}
	return lead.String
}

// recOutbox records what the Grouper appends, by thread.
type recOutbox struct {
	sinks []string
	mu    sync.Mutex
	ops   []recOp
}

type recOp struct {
	to    string
	group bool
	op    outbox.Op
}

func (o *recOutbox) Sinks() []string { return o.sinks }

func (o *recOutbox) Append(_ context.Context, _ *sql.Tx, runID string, ops ...outbox.Op) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range ops {
		o.ops = append(o.ops, recOp{to: runID, op: op})
	}
	return nil
}

func (o *recOutbox) AppendGroup(_ context.Context, _ *sql.Tx, lead string, ops ...outbox.Op) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range ops {
		o.ops = append(o.ops, recOp{to: lead, group: true, op: op})
	}
	return nil
}

func (o *recOutbox) recorded() []recOp {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]recOp(nil), o.ops...)
}

// tableRuns reads the runs from the store, as the run service does.
type tableRuns struct {
	db     *sql.DB
	tables database.Tables
}

func (r tableRuns) Run(ctx context.Context, runID string) (*runs.Run, error) {
	raw, err := r.tables.Runs.Get(ctx, r.db, runID)
	if err != nil {
		return nil, err
	}
	return decode(raw)
}

func (r tableRuns) GroupRuns(ctx context.Context, lead string) ([]*runs.Run, error) {
	rows, err := r.tables.Runs.GroupMembers(ctx, r.db, lead)
	if err != nil {
		return nil, err
	}
	var out []*runs.Run
	for _, raw := range rows {
		run, err := decode(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, run)
	}
	return out, nil
}

func decode(raw database.Run) (*runs.Run, error) {
	var a template.Alert
	if err := json.Unmarshal([]byte(raw.Alert), &a); err != nil {
		return nil, err
	}
	return &runs.Run{ID: raw.ID, Alertname: raw.Alertname, Labels: a.Labels, Status: raw.Status}, nil
}

// planner matches every alert with the plans of plans.
type planner struct {
	plans func(a template.Alert) []*playbooks.Plan
}

func (p planner) Plan(a template.Alert, _ vocab.Window) ([]*playbooks.Plan, error) {
	return p.plans(a), nil
}

// onePlan plans every alert with one playbook pb.
func onePlan(edit func(p *playbooks.Plan)) planner {
	return planner{plans: func(template.Alert) []*playbooks.Plan {
		p := &playbooks.Plan{Playbook: "pb"}
		if edit != nil {
			edit(p)
		}
		return []*playbooks.Plan{p}
	}}
}

// fleetAlert is an alert of model m on instance i.
func fleetAlert(fp, model string, i int, start time.Time) template.Alert {
	return template.Alert{Status: "firing", Fingerprint: fp, StartsAt: start,
		Labels: template.KV{"alertname": "VLLMHighTTFT", "model_name": model, "instance": fmt.Sprintf("10.0.0.%d:8000", i)}}
}
