// Package dirwatch reloads something when a file in its folders changes:
// the playbooks and the listener's TLS files both reload this way. It
// watches folders, not files: an editor's write-and-rename, and a mounted
// Kubernetes Secret or ConfigMap (updated by swapping a symlink), replace
// the file a watch on it would follow. A burst of events becomes one reload
// after Debounce; chmod-only events are ignored.
package dirwatch

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Options say what to watch and what to do.
type Options struct {
	// Name prefixes errors and logs ("playbooks", "web.tls").
	Name string
	// Dirs are the folders watched (duplicates are watched once).
	Dirs []string
	// Relevant filters events by path; nil: every file in Dirs.
	Relevant func(path string) bool
	// Debounce coalesces a burst of events into one Reload.
	Debounce time.Duration
	// Reload is called after a burst; it logs its own failure.
	Reload func()
	Log    *zap.Logger
}

// Run watches until ctx ends. A folder that cannot be watched is an error
// before anything is watched.
func Run(ctx context.Context, o Options) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("%s: watch: %w", o.Name, err)
	}
	defer w.Close()
	seen := map[string]bool{}
	for _, d := range o.Dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		if err := w.Add(d); err != nil {
			return fmt.Errorf("%s: watch %s: %w", o.Name, d, err)
		}
	}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !ev.Has(fsnotify.Chmod) && (o.Relevant == nil || o.Relevant(ev.Name)) {
				timer = time.After(o.Debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			o.Log.Warn("A file watcher reported an error.", zap.String("watching", o.Name), zap.Error(err))
		case <-timer:
			timer = nil
			o.Reload()
		}
	}
}
