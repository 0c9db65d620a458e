package vocab

import (
	"fmt"
	"slices"
	"strings"
)

// Status is where a run or one of its steps stands: the one set of words the
// store, the API, metrics, manifests and threads use. A run is queued, then
// running, then ends in one of the finished statuses; a step or a plan only
// ever ends in a finished one (or not-configured). Resolution is separate.
type Status string

// Statuses. Plain strings as stored and served.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusPartial   Status = "partial"
	StatusFailed    Status = "failed"
	StatusSkipped   Status = "skipped"
	StatusCancelled Status = "cancelled"
	// StatusNotConfigured is a step's only: it could not run because
	// something it needs is not configured (NotConfiguredError). Every
	// surface shows it grey, as "not configured: <what is missing>", never
	// as a failure.
	StatusNotConfigured Status = "not-configured"
)

// RunStatuses lists every status a run can have.
var RunStatuses = []Status{StatusQueued, StatusRunning, StatusSucceeded, StatusPartial, StatusFailed, StatusSkipped, StatusCancelled}

// Finished reports whether a run in status s has ended: it is neither
// queued nor running (nor unset).
func (s Status) Finished() bool {
	return s != "" && s != StatusQueued && s != StatusRunning
}

// ParseRunStatus reads a run status as the API's and the run list's status
// filter takes it.
func ParseRunStatus(s string) (Status, error) {
	if st := Status(s); slices.Contains(RunStatuses, st) {
		return st, nil
	}
	names := make([]string, len(RunStatuses))
	for i, st := range RunStatuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("status must be one of %s", strings.Join(names, ", "))
}
