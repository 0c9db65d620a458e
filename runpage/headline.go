package runpage

import (
	"strconv"
	"strings"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The run page's headline: the answer before the evidence. One sentence,
// the verdict in words and the one line that explains it ("unexplained —
// profile: GEMM 93% of GPU time vs 49% in the healthy baseline: a GEMM
// kernel regression"), where the cause sits, then which server and model
// the alert was about. A run without a verdict says so, and why.

// headline is what the top of the run page shows.
type headline struct {
	// Verdict is the verdict in words ("KV cache pressure"), or "No verdict
	// yet" / "No verdict".
	Verdict string
	// Line explains it: the strongest evidence, or why there is no verdict.
	Line string
	// Preliminary: the verdict was reached over part of tier 1.
	Preliminary bool
	// Scope is where the cause sits in words ("this server", "the whole
	// fleet", "this server's GPU", "not measured"); ScopeWhy is the
	// evidence line that says so. Both "" when triage said nothing of it.
	Scope, ScopeWhy string
	// Class is the block's CSS class: ok, cause, unexplained, live, bad or other.
	Class           string
	Instance, Model string // the alert's instance and model_name labels
	Origin          string // the alert's startsAt, formatted; "" when it carried none
}

// verdictWords are the verdict ids as a reader says them.
var verdictWords = map[string]string{
	vocab.VerdictHealthy:      "healthy",
	vocab.VerdictOverload:     "overload",
	vocab.VerdictKVPressure:   "KV cache pressure",
	vocab.VerdictPrefillBound: "prefill-bound",
	vocab.VerdictDecodeBound:  "decode-bound",
	vocab.VerdictClientAborts: "client aborts",
	vocab.VerdictUnexplained:  "unexplained",
	vocab.VerdictGPUDegraded:  "GPU degraded",
	vocab.VerdictNoEvidence:   "no evidence",
}

// verdictInWords is id in words; an id not listed reads with spaces for dashes.
func verdictInWords(id string) string {
	if w, ok := verdictWords[id]; ok {
		return w
	}
	return strings.ReplaceAll(id, "-", " ")
}

// scopeWords are the verdict's scopes as a reader says them.
var scopeWords = map[string]string{
	vocab.ScopeSingle:  "this server",
	vocab.ScopeSeveral: "several servers",
	vocab.ScopeFleet:   "the whole fleet",
}

// scopeGPUWords are the scopes of a gpu-degraded verdict: the cause is the
// GPU, this server's whether or not its peers were measured.
var scopeGPUWords = map[string]string{
	"":                 "this server's GPU",
	vocab.ScopeSingle:  "this server's GPU",
	vocab.ScopeSeveral: "the GPUs of several servers",
	vocab.ScopeFleet:   "the GPUs of the whole fleet",
}

// scopeOf is where v's cause sits, in words, and the line that says so,
// from what vocab.ScopeText reads.
func scopeOf(v *vocab.Verdict) (scope, why string) {
	text, line := vocab.ScopeText(v), vocab.ScopeLine(v)
	if w, ok := scopeGPUWords[v.Scope]; ok && v.ID == vocab.VerdictGPUDegraded {
		return w, line
	}
	switch {
	case text == "":
		return "", ""
	case v.Scope == "":
		return "not measured", strings.TrimPrefix(line, "scope not measured: ")
	}
	if w, ok := scopeWords[v.Scope]; ok {
		return w, line
	}
	return strings.ReplaceAll(v.Scope, "-", " "), line
}

// newHeadline says the run's answer: its verdict and the line that explains
// it, or why it has none.
func newHeadline(r *runs.Run, stepsDone int) headline {
	h := headline{Instance: r.Labels["instance"], Model: r.Labels["model_name"]}
	if !r.StartsAt.IsZero() {
		h.Origin = whenPtr(&r.StartsAt)
	}
	v := r.Verdict
	if v == nil {
		h.Verdict, h.Line, h.Class = noVerdict(r, stepsDone)
		return h
	}
	h.Verdict, h.Line, h.Preliminary = verdictInWords(v.ID), explainLine(v), v.Preliminary
	if v.Profile != nil && v.ID == vocab.VerdictUnexplained { // the metrics found no cause; the kernels did
		h.Verdict = "unexplained by the metrics"
	}
	h.Scope, h.ScopeWhy = scopeOf(v)
	switch v.ID {
	case vocab.VerdictHealthy:
		h.Class = "ok"
	case vocab.VerdictUnexplained:
		h.Class = "unexplained"
	case vocab.VerdictNoEvidence: // nothing measured: no cause found, and none ruled out
		h.Class = "other"
	default:
		h.Class = "cause"
	}
	return h
}

// explainLine is the one line that explains v: the profile's finding once
// a profile refined it (the verdict's own record, vocab.ProfileFinding);
// else the first line of the verdict's own evidence, which its deciding
// rule writes.
func explainLine(v *vocab.Verdict) string {
	if v.Profile != nil {
		return v.Profile.Text()
	}
	scope := vocab.ScopeLine(v)
	for _, l := range v.Evidence {
		if l != scope {
			return l
		}
	}
	return ""
}

// noVerdict is the headline of a run without a verdict: not yet (queued,
// running) or none, with the run's reason.
func noVerdict(r *runs.Run, stepsDone int) (verdict, line, class string) {
	why := ""
	if r.Reason != "" {
		why = ": " + clip.Line(r.Reason, 200)
	}
	switch r.Status {
	case vocab.StatusQueued:
		return "No verdict yet", "the run is queued" + why, "live"
	case vocab.StatusRunning:
		done := "no step has finished yet"
		switch {
		case stepsDone == 1:
			done = "1 step has finished"
		case stepsDone > 1:
			done = strconv.Itoa(stepsDone) + " steps have finished"
		}
		return "No verdict yet", "the run is running; " + done, "live"
	case vocab.StatusSucceeded:
		return "No verdict", "the run succeeded, but its playbooks have no triage step" + why, "other"
	case vocab.StatusSkipped:
		return "No verdict", "the run was skipped" + why, "other"
	case vocab.StatusCancelled:
		return "No verdict", "the run was cancelled" + why, "bad"
	}
	return "No verdict", "the run " + statusInWords(r.Status) + why, "bad"
}

// statusInWords is a run's final status as the end of "the run …".
func statusInWords(status vocab.Status) string {
	switch status {
	case vocab.StatusFailed:
		return "failed"
	case vocab.StatusPartial:
		return "ended partial"
	case "":
		return "has no status"
	}
	return "ended " + strings.ReplaceAll(string(status), "-", " ")
}
