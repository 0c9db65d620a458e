package actions

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/silences"
)

// noOutbox takes the replies' operations and delivers none: the replies
// are read back with ActionReply.
type noOutbox struct{}

func (noOutbox) Append(context.Context, *sql.Tx, string, ...outbox.Op) error { return nil }

// rig is the actions over a SQLite store and a real Alertmanager.
type rig struct {
	db  *sql.DB
	act *Actions
	am  string
}

func newRig(t *testing.T, defaults []string) *rig {
	t.Helper()
	db, d, drv, err := database.Open("", filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := database.Migrate(context.Background(), db, d, drv); err != nil {
		t.Fatal(err)
	}
	am := testenv.StartAlertmanager(t, "route:\n  receiver: none\nreceivers:\n  - name: none\n")
	c, err := silences.New(config.Alertmanager{URLs: []string{am.URL}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	act, err := New(Deps{Store: func() Store { return db }, Tables: database.NewTables(d), Dialect: d, Outbox: noOutbox{},
		AM: c, AMTimeout: 5 * time.Second, AMURLs: 1, Matchers: defaults})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{db: db, act: act, am: am.URL}
}

// run stores run id with labels and, when plans is not nil, its stored
// plans (as the runner stores them with the thread's parent).
func (r *rig) run(t *testing.T, id string, labels map[string]string, plans []playbooks.StoredPlan) {
	t.Helper()
	alert, _ := json.Marshal(map[string]any{"labels": labels})
	var stored sql.NullString
	if plans != nil {
		b, _ := json.Marshal(plans)
		stored = sql.NullString{String: string(b), Valid: true}
	}
	if _, err := r.db.Exec(`INSERT INTO autocapture_runs (id, run_key, fingerprint, alertname, alert, starts_at, status,
		created_at, queued_at, plans) VALUES ($1, $1, $1, 'A', $2, 0, 'running', 0, 0, $3)`, id, string(alert), stored); err != nil {
		t.Fatal(err)
	}
}

// silences asks Alertmanager for its silences (API v2), each keyed by the
// run its comment names, as its sorted name=value matchers.
func (r *rig) silences(t *testing.T) map[string]string {
	t.Helper()
	resp, err := http.Get(r.am + "/api/v2/silences")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		Comment  string `json:"comment"`
		Matchers []struct {
			Name, Value string
			IsEqual     bool `json:"isEqual"`
		} `json:"matchers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list {
		var ms []string
		for _, m := range s.Matchers {
			if !m.IsEqual {
				t.Errorf("matcher %s!=%s, want equality", m.Name, m.Value)
			}
			ms = append(ms, m.Name+"="+m.Value)
		}
		sort.Strings(ms)
		out[s.Comment[strings.LastIndex(s.Comment, " ")+1:]] = strings.Join(ms, ",")
	}
	return out
}

// TestSilenceMatchesThePlansLabels, against a real Alertmanager: a run
// whose plan chose silence.matchers is silenced on exactly those labels; a
// run whose plan chose none on the daemon's default (Deps.Matchers); a run
// whose alert carries none of its labels is refused in words, and nothing
// is silenced; a run whose plans are not yet stored is told to wait.
func TestSilenceMatchesThePlansLabels(t *testing.T) {
	r := newRig(t, []string{"alertname", "pod"})
	ctx := context.Background()
	labels := map[string]string{"alertname": "A", "instance": "gpu-1:8000", "model_name": "llama", "pod": "p-1"}
	chose := []playbooks.StoredPlan{{Playbook: "other"}, {Playbook: "p", Silence: []string{"alertname", "model_name"}}}
	r.run(t, "r-plan", labels, chose)
	r.run(t, "r-default", labels, []playbooks.StoredPlan{{Playbook: "q"}})
	r.run(t, "r-none", map[string]string{"instance": "gpu-1:8000"}, chose)
	r.run(t, "r-queued", labels, nil)
	for _, id := range []string{"r-plan", "r-default", "r-none"} {
		res, err := r.act.Silence(ctx, Click{RunID: id, Choice: "1h", Interaction: "i-" + id, UserID: "U0ALICE", UserName: "alice"})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		want := map[bool]string{true: ResultUnmatched, false: "done"}[id == "r-none"]
		if res.Result != want {
			t.Errorf("%s: %+v, want %s", id, res, want)
		}
	}
	got := r.silences(t)
	want := map[string]string{"r-plan": "alertname=A,model_name=llama", "r-default": "alertname=A,pod=p-1"}
	if len(got) != len(want) || got["r-plan"] != want["r-plan"] || got["r-default"] != want["r-default"] {
		t.Errorf("Alertmanager holds %v, want %v", got, want)
	}
	rep, err := r.act.ActionReply(ctx, "r-plan", "k", "silence/r-plan/i-r-plan", false)
	if err != nil || !strings.Contains(rep.Notice, "silenced alertname=A, model_name=llama in Alertmanager") {
		t.Errorf("the reply says %q (%v), want the plan's matchers", rep.Notice, err)
	}
	rep, err = r.act.ActionReply(ctx, "r-none", "k", "silence/r-none/i-r-none", false)
	if err != nil || !strings.Contains(rep.Notice, "none of the labels its silence matches on (alertname, model_name)") ||
		!strings.Contains(rep.Notice, "would silence every alert") || strings.Contains(rep.Notice, "click Silence again") {
		t.Errorf("the refusal says %q (%v), want why, in words, and no advice to click again", rep.Notice, err)
	}
	res, err := r.act.Silence(ctx, Click{RunID: "r-queued", Choice: "4h", Interaction: "i-q", UserID: "U0ALICE"})
	if err != nil || res.Result != ResultUnplanned || !strings.Contains(res.Private, "not chosen its playbook yet") {
		t.Errorf("a run without plans: %+v %v, want it told to wait for its thread", res, err)
	}
	if rows, _ := r.act.d.Tables.Actions.List(ctx, r.db, "r-queued"); len(rows) != 0 {
		t.Errorf("a run without plans kept %+v, want no action row", rows)
	}
}
