package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/notify"
)

// demoThread prints the run's thread as the console notifier does, with what
// a new user needs beside it: the run page's URL under the parent, and one
// plain line instead of a red failure for a step that needs a backend the
// demo does not run (no Prometheus: tier 1 is the instance's own /metrics).
// It tells the demo the run's id and when the run has finished.
type demoThread struct {
	console *notify.Console
	w       io.Writer
	baseURL string // the daemon's, for the run page

	mu       sync.Mutex
	runID    string
	opened   chan string         // the run id, once
	finished chan notify.Summary // the closing summary, once
	missing  map[string]bool     // backends a step lacked, said once each
	lacking  []string            // the steps that lacked one, in order
}

var _ notify.Notifier = (*demoThread)(nil)

func newDemoThread(w io.Writer, baseURL string) *demoThread {
	return &demoThread{console: notify.NewConsole(w), w: w, baseURL: baseURL,
		opened: make(chan string, 1), finished: make(chan notify.Summary, 1), missing: map[string]bool{}}
}

// Open prints the parent and the run page's URL.
func (d *demoThread) Open(ctx context.Context, run notify.RunInfo) (notify.Thread, error) {
	t, err := d.console.Open(ctx, run)
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "   page:      %s/runs/%s\n\n", d.baseURL, run.ID)
	if d.runID == "" {
		d.runID = run.ID
		d.opened <- run.ID
	}
	return t, err
}

// Reply prints a finished step; a step that needs an absent backend gets a
// line saying so and what stands in for it.
func (d *demoThread) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	if backend, instead := missingBackend(r); backend != "" {
		d.mu.Lock()
		defer d.mu.Unlock()
		if r.Status == "failed" && !slices.Contains(d.lacking, r.StepID) { // a retried reply comes again
			d.lacking = append(d.lacking, r.StepID)
		}
		fmt.Fprintf(d.w, "── run %s · step %s (%s, tier %s) not run: no %s", t.TS, r.StepID, r.Kind, r.Tier, backend)
		if !d.missing[backend] {
			d.missing[backend] = true
			fmt.Fprintf(d.w, "; %s", instead)
		}
		fmt.Fprintln(d.w)
		return nil
	}
	return d.console.Reply(ctx, t, r)
}

// Close prints the outcome and, on the run's final update, tells the demo.
func (d *demoThread) Close(ctx context.Context, t notify.Thread, s notify.Summary) error {
	d.mu.Lock()
	s.Reason = d.explain(s.Reason)
	d.mu.Unlock()
	err := d.console.Close(ctx, t, s)
	if s.Key == notify.KeyCloseFinished {
		select {
		case d.finished <- s:
		default:
		}
	}
	return err
}

// notFinished is the runner's reason for a partial run ("<plan>: 3 of 7
// steps did not finish: a (reason), b (reason)").
var notFinished = regexp.MustCompile(`^[^:]+: \d+ of \d+ steps? did not finish: (.+)$`)

// explain says why a run is partial when the only steps that did not finish
// are ones that lacked a backend the demo does not run; any other reason is
// kept as it is. Callers hold mu.
func (d *demoThread) explain(reason string) string {
	m := notFinished.FindStringSubmatch(reason)
	if m == nil {
		return reason
	}
	var ids []string
	for _, part := range strings.Split(m[1], ", ") {
		id, _, _ := strings.Cut(part, " (")
		if !slices.Contains(d.lacking, id) {
			return reason
		}
		ids = append(ids, id)
	}
	return fmt.Sprintf("partial only because %s need a Prometheus the demo does not run (the verdict is from the instance's /metrics)",
		strings.Join(ids, ", "))
}

// missingBackend names the backend a failed or skipped step lacked (the
// daemon has none configured) and what the run uses instead; "" when the
// step did not fail for that.
func missingBackend(r notify.StepReport) (backend, instead string) {
	if r.Status != "failed" && r.Status != "skipped" {
		return "", ""
	}
	msg := r.Reason + " " + r.Error
	switch {
	case r.Reason == string(capture.ReasonBadConfig) && strings.Contains(msg, "no Prometheus"):
		return "Prometheus", "tier 1 from the instance's own /metrics (the scrape step); pass --prometheus.url URL for the PromQL window, baselines and charts"
	case strings.Contains(msg, "no trace backend"):
		return "trace backend", "tier 2 needs Jaeger or Tempo (traces.url in a config file for `serve`)"
	}
	return "", ""
}
