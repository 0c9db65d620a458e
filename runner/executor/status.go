package executor

import (
	"fmt"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// Summarize folds step records into one status and the reason it is not
// succeeded: succeeded when nothing failed or was cancelled, partial when
// something else succeeded, failed otherwise. Skipped and not-configured
// steps count for neither.
// The same rule sums up a plan and, over all its plans' steps, a run.
func Summarize(recs []StepRecord) (status vocab.Status, reason string) {
	var ok, failed, cancelled int
	var bad []string
	for _, r := range recs {
		switch r.Status {
		case vocab.StatusSucceeded:
			ok++
		case vocab.StatusFailed:
			failed++
			bad = append(bad, fmt.Sprintf("%s (%s)", r.ID, r.Reason))
		case vocab.StatusCancelled:
			cancelled++
			bad = append(bad, fmt.Sprintf("%s (cancelled)", r.ID))
		}
	}
	switch {
	case failed == 0 && cancelled == 0:
		return vocab.StatusSucceeded, ""
	case ok > 0:
		return vocab.StatusPartial, fmt.Sprintf("%d of %d steps did not finish: %s", failed+cancelled, len(recs), strings.Join(bad, ", "))
	}
	return vocab.StatusFailed, fmt.Sprintf("no step succeeded: %s", strings.Join(bad, ", "))
}
