package playbooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

func playbookFile(limit string) string {
	return "playbooks:\n  - name: p\n    match: [alertname=\"A\"]\n    steps:\n      - id: slow\n        ttraces: {limit: " + limit + "}\n"
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func limitOf(t *testing.T, r *Reloader) int {
	t.Helper()
	plans, err := r.Plan(alert("alertname", "A"), testWindow)
	if err != nil || len(plans) != 1 {
		t.Fatalf("plans %d, err %v", len(plans), err)
	}
	return plans[0].Steps[0].Config.(*tTracesConfig).Limit
}

func TestReloaderKeepsLastGoodSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, playbookFile("1"))
	reg := prometheus.NewRegistry()
	r, err := NewReloader(Sources{Globs: []string{filepath.Join(dir, "*.yaml")}}, zap.NewNop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	okGauge := func() float64 {
		return testutil.ToFloat64(r.success)
	}
	if okGauge() != 1 || limitOf(t, r) != 1 {
		t.Fatalf("initial: gauge %v limit %d", okGauge(), limitOf(t, r))
	}
	held := r.Current().Playbooks[0].Plan(alert("alertname", "A"), testWindow)

	writeFile(t, path, playbookFile("1\n        bogus: 1"))
	err = r.Reload()
	if err == nil || !strings.Contains(err.Error(), "a.yaml:7:9: ") {
		t.Fatalf("broken edit: err %v, want a.yaml:7:9", err)
	}
	if okGauge() != 0 || limitOf(t, r) != 1 {
		t.Errorf("after broken edit: gauge %v limit %d, want 0 and the old set", okGauge(), limitOf(t, r))
	}
	writeFile(t, path, playbookFile("2"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if okGauge() != 1 || limitOf(t, r) != 2 {
		t.Errorf("after fix: gauge %v limit %d", okGauge(), limitOf(t, r))
	}
	if got := held.Steps[0].Config.(*tTracesConfig).Limit; got != 1 {
		t.Errorf("a plan made before the reload changed: limit %d", got)
	}
	if n, _ := testutil.GatherAndCount(reg, "autocapture_config_last_reload_success_timestamp_seconds"); n != 1 {
		t.Errorf("timestamp gauge registered %d times", n)
	}
}

// TestReloadUnderConcurrentPlans plans and evaluates from many goroutines while
// the file changes and Watch reloads it; run it with -race.
func TestReloadUnderConcurrentPlans(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, playbookFile("1"))
	r, err := NewReloader(Sources{Globs: []string{filepath.Join(dir, "*.yaml")}}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan error, 1)
	r.Debounce = 10 * time.Millisecond
	go func() { watched <- r.Watch(ctx) }()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				plans, err := r.Plan(alert("alertname", "A"), testWindow)
				if err != nil || len(plans) != 1 || plans[0].Steps[0].RenderErr != nil {
					t.Errorf("plan during reload: %d plans, err %v", len(plans), err)
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 2; i <= 6; i++ {
		// Rewritten until seen: the watcher may not be installed yet at first.
		for n := 0; limitOf(t, r) != i; n++ {
			if time.Now().After(deadline) {
				t.Fatalf("watch never picked up limit %d", i)
			}
			if n%20 == 0 {
				writeFile(t, path, playbookFile(string(rune('0'+i))))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	cancel()
	if err := <-watched; err != nil {
		t.Errorf("watch: %v", err)
	}
}

// TestWatchAFolderOfPlaybooks: a folder given as the glob is watched itself, so
// an edit of a file inside it reloads.
func TestWatchAFolderOfPlaybooks(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), playbookFile("1"))
	r, err := NewReloader(Sources{Globs: []string{dir}}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r.Debounce = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Watch(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for limitOf(t, r) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("an edit inside the watched folder was not reloaded")
		}
		writeFile(t, filepath.Join(dir, "a.yaml"), playbookFile("3")) // again, in case the watch was not up yet
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
