package lifecycle

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/testkit/fakestep"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

// TestHugeLabelsAreAcceptedAndRun: label values of 1 MB that do not
// compress (a hostile target's) are accepted, grouped into a fleet and
// held to a cooldown on both databases: every key an index holds is
// bounded (PostgreSQL refuses a B-tree entry over ~2.7 KB), and two such
// alerts that differ only past the bound are still told apart.
func TestHugeLabelsAreAcceptedAndRun(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db testenv.DB) {
		huge := func() string {
			b := make([]byte, 3<<18)
			rand.Read(b)
			return base64.StdEncoding.EncodeToString(b) // 1 MiB, incompressible
		}
		c := fakestep.NewCounter()
		p := fakePlanner{Plans: func(a template.Alert) []*playbooks.Plan {
			pl := plan("pb", fakestep.Step("snap", vocab.TierMetrics, fakestep.OK(c, nil)))
			pl.Cooldown, pl.CooldownKey = time.Hour, "pb/"+a.Labels["model_name"]+"/"+a.Labels["instance"]
			return []*playbooks.Plan{pl}
		}}
		// Each write of these rows holds SQLite's one writer for long
		// enough, under -race on a loaded machine, that fastRuns' 2 s lease
		// lapsed three times: the lease is not what this test is about.
		s := newProc(t, db, p, true, withConfig(func(r *config.Runs) { r.LeaseTimeout = 20 * time.Second }))
		prefix, name, model := huge(), huge(), huge()
		for i, fp := range []string{"a", "b"} {
			a := firing(fp, time.Now().UTC())
			a.Labels["alertname"], a.Labels["model_name"] = name, model
			a.Labels["instance"] = prefix + fp // differs only past every bound
			a.Annotations = template.KV{"summary": huge()}
			id := acceptOne(t, s, a).RunID
			r := waitRun(t, s, id, "finished", isFinished)
			if r.Status != vocab.StatusSucceeded {
				t.Errorf("alert %d: run %s, want succeeded (a different instance holds no cooldown): %s", i, r.Status, r.Reason)
			}
		}
	})
}
