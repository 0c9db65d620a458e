package playbooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/dirwatch"
	"github.com/autocapture/autocapture/vocab"
)

// Reloader holds the active playbook set and replaces it on Reload: from a file
// change (Watch), SIGHUP or POST /-/reload. A broken edit keeps the last good set.
// Plans already made keep the playbooks they were built from.
type Reloader struct {
	// Debounce coalesces a burst of file events (an editor's write-and-rename)
	// into one reload; set it before Watch. NewReloader sets 250ms.
	Debounce time.Duration

	src Sources
	log *zap.Logger
	cur atomic.Pointer[Set]
	mu  sync.Mutex // serialises reloads

	success   prometheus.Gauge
	timestamp prometheus.Gauge
}

// NewReloader loads the set once (an error here is fatal to the caller) and
// registers autocapture_config_last_reload_successful and
// autocapture_config_last_reload_success_timestamp_seconds on reg (nil: none).
func NewReloader(src Sources, log *zap.Logger, reg prometheus.Registerer) (*Reloader, error) {
	r := &Reloader{Debounce: 250 * time.Millisecond, src: src, log: log,
		success: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autocapture_config_last_reload_successful",
			Help: "Whether the last playbook reload succeeded (1) or kept the previous set (0)."}),
		timestamp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autocapture_config_last_reload_success_timestamp_seconds",
			Help: "When the playbooks were last loaded successfully."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.success, r.timestamp} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("playbooks: register reload metrics: %w", err)
			}
		}
	}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Current returns the active set.
func (r *Reloader) Current() *Set { return r.cur.Load() }

// Reload loads the sources again. On success the new set becomes active; on error
// the previous set stays, the error (file:line:col) is logged and returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := Load(r.src, r.log)
	if err != nil {
		r.success.Set(0)
		r.log.Error("Playbook reload failed; keeping the previous set.", zap.Error(err))
		return fmt.Errorf("playbooks: reload: %w", err)
	}
	r.cur.Store(s)
	r.success.Set(1)
	r.timestamp.SetToCurrentTime()
	shipped, files := s.Origins()
	r.log.Info("Playbooks loaded.", zap.Int("playbooks", len(s.Playbooks)), zap.Int("shipped", shipped),
		zap.Int("from_files", files), zap.Strings("replaced", s.Replaced), zap.Strings("files", s.Files))
	return nil
}

// Plan plans the alert on the current set.
func (r *Reloader) Plan(alert template.Alert, w vocab.Window) ([]*Plan, error) {
	return r.Current().Plan(alert, w)
}

// Rebuild rebuilds a stored plan from its own source (the current set is not used).
func (r *Reloader) Rebuild(p StoredPlan, alert template.Alert, w vocab.Window) (*Plan, error) {
	return Rebuild(p, alert, w)
}

// Watch reloads when a file in the globs' directories changes, until ctx ends.
// Bursts of events are coalesced (Debounce). With no globs (the embedded set)
// there is nothing to watch and it waits for ctx.
func (r *Reloader) Watch(ctx context.Context) error {
	if len(r.src.Globs) == 0 {
		<-ctx.Done()
		return nil
	}
	var dirs []string
	for _, g := range r.src.Globs {
		d := filepath.Dir(g)
		if isDir(g) { // a folder of playbooks: watch the folder itself
			d = g
		}
		dirs = append(dirs, d)
	}
	return dirwatch.Run(ctx, dirwatch.Options{Name: "playbooks", Dirs: dirs, Relevant: r.relevant, Debounce: r.Debounce,
		Log: r.log, Reload: func() { _ = r.Reload() }}) // logged; the previous set stays on error
}

// relevant says whether a changed path is one of the globs' files, or a YAML
// file inside a folder given as a glob.
func (r *Reloader) relevant(name string) bool {
	for _, g := range r.src.Globs {
		if isDir(g) && filepath.Clean(filepath.Dir(name)) == filepath.Clean(g) && strings.HasSuffix(name, ".yaml") {
			return true
		}
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
		if ok, _ := filepath.Match(filepath.Base(g), filepath.Base(name)); ok && filepath.Dir(g) == filepath.Dir(name) {
			return true
		}
	}
	return false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
