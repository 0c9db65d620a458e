package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// demoThread prints the run's thread as the console notifier does, with what
// a new user needs beside it: the run page's URL under the parent, and for a
// step whose backend the demo does not run (no Prometheus: tier 1 is the
// instance's own /metrics) what stands in for it, said once per backend.
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

// Reply prints a finished step as the console does; a step not configured
// for want of a backend the demo does not run gets, the first time, what
// stands in for it.
func (d *demoThread) Reply(ctx context.Context, t notify.Thread, r notify.StepReport) error {
	backend, instead := missingBackend(r)
	if backend == "" {
		return d.console.Reply(ctx, t, r)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "── run %s · step %s (%s, tier %s) not configured: %s", t.TS, r.StepID, r.Kind, r.Tier, r.Reason)
	if !d.missing[backend] {
		d.missing[backend] = true
		fmt.Fprintf(d.w, "; %s", instead)
	}
	fmt.Fprintln(d.w)
	return nil
}

// Close prints the outcome and, on the run's final update, tells the demo.
func (d *demoThread) Close(ctx context.Context, t notify.Thread, s notify.Summary) error {
	err := d.console.Close(ctx, t, s)
	if s.Key == notify.KeyCloseFinished {
		select {
		case d.finished <- s:
		default:
		}
	}
	return err
}

// missingBackend names the backend a not-configured step lacked and what the
// demo uses instead; "" for any other step.
func missingBackend(r notify.StepReport) (backend, instead string) {
	if r.Status != vocab.StatusNotConfigured {
		return "", ""
	}
	switch {
	case strings.Contains(r.Reason, "no Prometheus"):
		return "Prometheus", "tier 1 from the instance's own /metrics (the scrape step); pass --prometheus.url URL for the PromQL window, baselines and charts"
	case strings.Contains(r.Reason, "no trace backend"):
		return "trace backend", "tier 2 needs Jaeger or Tempo (traces.url in a config file for `serve`)"
	}
	return "", ""
}
