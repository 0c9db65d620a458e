package playbooks

import (
	"encoding/json"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// Env is the environment `when` expressions see:
//
//	alert.labels.<name>, alert.annotations.<name>, alert.status, alert.fingerprint
//	steps.<id>.<finding>      a step's findings, flattened to the top
//	steps.<id>.verdict        triage's verdict id ("" when the step set none)
//	steps.<id>.contributing   triage's contributing factors
//	steps.<id>.signals.<name> canonical signals
//	steps.<id>.summary        the step's one-line summary
//
// A step that has not run (skipped, failed, later tier) is absent from steps.
func Env(alert template.Alert, prior map[string]*vocab.Result) map[string]any {
	steps := make(map[string]any, len(prior))
	for id, r := range prior {
		if r == nil {
			continue
		}
		m := make(map[string]any, len(r.Findings)+4)
		for k, v := range r.Findings {
			m[k] = v
		}
		m["summary"] = r.Summary
		m["verdict"] = ""
		m["contributing"] = []string{}
		if r.Verdict != nil {
			m["verdict"] = r.Verdict.ID
			m["contributing"] = r.Verdict.Contributing
		}
		sig := make(map[string]any, len(r.Signals))
		for k, v := range r.Signals {
			sig[k] = v
		}
		m["signals"] = sig
		steps[id] = m
	}
	return map[string]any{
		"alert": map[string]any{
			"labels":      map[string]string(alert.Labels),
			"annotations": map[string]string(alert.Annotations),
			"status":      alert.Status,
			"fingerprint": alert.Fingerprint,
			"startsAt":    alert.StartsAt,
		},
		"steps": steps,
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
