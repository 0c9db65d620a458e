package runpage

import (
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/runner/runs"
)

// shownRun is the run as the pages show it: the alert's name, labels and
// annotations, written by whoever controls a target or a rule, bounded
// (untrusted.Clip) and with control, bidi and invisible characters shown
// escaped; html/template then escapes the markup. Every page reads the
// alert's text through here.
func shownRun(r runs.Run) runs.Run {
	r.Alertname = shownText(r.Alertname)
	r.Labels, r.Annotations = shownKV(r.Labels), shownKV(r.Annotations)
	return r
}

func shownText(s string) string { return untrusted.Visible(untrusted.Clip(s)) }

func shownKV(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[shownText(k)] = shownText(v)
	}
	return out
}
