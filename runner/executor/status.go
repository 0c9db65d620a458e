package executor

import (
	"fmt"
	"strings"
)

// Statuses a step or a plan ends in: the finished subset of the run statuses
// (package runner adds queued and running). Plain strings, as stored and
// served by the API.
const (
	Succeeded = "succeeded"
	Partial   = "partial"
	Failed    = "failed"
	Skipped   = "skipped"
	Cancelled = "cancelled"
	// NotConfigured is a step that could not run because something it
	// needs is not configured (vocab.NotConfigured: no Prometheus, no
	// trace backend): not a failure. Its reason says what is missing.
	NotConfigured = "not-configured"
)

// Summarize folds step records into one status and the reason it is not
// succeeded: succeeded when nothing failed or was cancelled, partial when
// something else succeeded, failed otherwise. Skipped and not-configured
// steps count for neither.
// The same rule sums up a plan and, over all its plans' steps, a run.
func Summarize(recs []StepRecord) (status, reason string) {
	var ok, failed, cancelled int
	var bad []string
	for _, r := range recs {
		switch r.Status {
		case Succeeded:
			ok++
		case Failed:
			failed++
			bad = append(bad, fmt.Sprintf("%s (%s)", r.ID, r.Reason))
		case Cancelled:
			cancelled++
			bad = append(bad, fmt.Sprintf("%s (cancelled)", r.ID))
		}
	}
	switch {
	case failed == 0 && cancelled == 0:
		return Succeeded, ""
	case ok > 0:
		return Partial, fmt.Sprintf("%d of %d steps did not finish: %s", failed+cancelled, len(recs), strings.Join(bad, ", "))
	}
	return Failed, fmt.Sprintf("no step succeeded: %s", strings.Join(bad, ", "))
}
