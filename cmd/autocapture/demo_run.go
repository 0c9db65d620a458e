package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// fire waits for the warm-up, sends the alert, follows the run to its end
// and prints its verdict, its profile's report and the folder of its
// artifacts. A run that ends without completing is an error with its reason.
func (s *demoSetup) fire(ctx context.Context, f demoFlags, stdout io.Writer) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.warmup):
	}
	rule := demoRules[f.engine][f.scenario]
	body, err := demoWebhook(rule, s.sim.addr, demoModel, f.engine, s.sim.started)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nFiring %s for instance %s (an Alertmanager v4 webhook) after %s of traffic.\n\n",
		rule.alertname, s.sim.addr, f.warmup)
	fired := time.Now()
	if err := postWebhook(ctx, s.url, body); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, f.timeout, fmt.Errorf("the run did not finish within --timeout %s", f.timeout))
	defer cancel()
	var id string
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case id = <-s.thread.opened:
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-s.thread.finished:
	}
	run, err := s.waitManifest(ctx, id)
	if err != nil {
		return err
	}
	return s.report(stdout, run, time.Since(fired))
}

// report prints the run's outcome and artifacts; an error unless the run
// completed (succeeded, or partial with a verdict).
func (s *demoSetup) report(stdout io.Writer, run runs.Run, took time.Duration) error {
	fmt.Fprintf(stdout, "\n══ %s in %s: status %s", run.ID, took.Round(100*time.Millisecond), run.Status)
	if run.Verdict != nil {
		fmt.Fprintf(stdout, ", verdict %s", run.Verdict.ID)
	}
	fmt.Fprintln(stdout)
	if v := run.Verdict; v != nil && v.Profile != nil { // the API's verdict, as the profile refined it
		fmt.Fprintf(stdout, "   verdict:   %s\n", vocab.VerdictText(v))
	}
	printProfileReport(stdout, run)
	folder := ""
	if run.Manifest != "" {
		folder = filepath.Join(s.dir, "data", "artifacts", filepath.FromSlash(path.Dir(run.Manifest)))
		fmt.Fprintf(stdout, "   artifacts: %s\n", folder)
		printFiles(stdout, folder)
	}
	fmt.Fprintf(stdout, "   run:       %s/api/v1/runs/%s\n", s.url, run.ID)
	switch {
	case run.Status == vocab.StatusSucceeded, run.Status == vocab.StatusPartial && run.Verdict != nil:
		return nil
	case run.Reason != "":
		return fmt.Errorf("%w: %s: %s", errRunFailed, run.Status, run.Reason)
	}
	return fmt.Errorf("%w: %s", errRunFailed, run.Status)
}

// waitManifest reads the run until its manifest is written (shortly after the
// run finished) or ctx ends; then the run as it is.
func (s *demoSetup) waitManifest(ctx context.Context, id string) (runs.Run, error) {
	for {
		run, err := s.getRun(ctx, id)
		if err == nil && run.Manifest != "" {
			return run, nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return run, fmt.Errorf("read run %s: %w", id, err)
			}
			return run, nil // no manifest: report says so by omission
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// getRun reads GET /api/v1/runs/{id}, as any API client would.
func (s *demoSetup) getRun(ctx context.Context, id string) (runs.Run, error) {
	var run runs.Run
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/api/v1/runs/"+id, nil)
	if err != nil {
		return run, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return run, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return run, fmt.Errorf("GET /api/v1/runs/%s: %s", id, resp.Status)
	}
	return run, json.NewDecoder(resp.Body).Decode(&run)
}

// printProfileReport prints the profile step's reading of the traces: its
// summary, the top kernels and the GPU's idle share.
func printProfileReport(w io.Writer, run runs.Run) {
	for _, st := range run.Steps {
		if st.Kind != "profile" || st.Status != vocab.StatusSucceeded {
			continue
		}
		fmt.Fprintf(w, "   profile:   %s\n", st.Summary)
		if v, ok := st.Findings["idle_share"].(float64); ok {
			fmt.Fprintf(w, "              GPU idle %.0f%% of the frame\n", 100*v)
		}
		kernels, _ := st.Findings["top_kernels"].([]any)
		for i, k := range kernels {
			m, _ := k.(map[string]any)
			if i == 5 || m == nil {
				break
			}
			share, _ := m["share"].(float64)
			family, _ := m["family"].(string)
			name, _ := m["name"].(string)
			fmt.Fprintf(w, "              %5.1f%%  %-10s %s\n", 100*share, family, clipName(name, 72))
		}
	}
}

// clipName shortens a kernel's name to n runes.
func clipName(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// printFiles lists the files under dir with their sizes.
func printFiles(w io.Writer, dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(w, "     %-64s %9d bytes\n", strings.ReplaceAll(rel, string(filepath.Separator), "/"), info.Size())
		return nil
	})
}
