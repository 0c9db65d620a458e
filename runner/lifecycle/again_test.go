package lifecycle

import (
	"testing"

	"github.com/autocapture/autocapture/playbooks"
)

// TestProfileOnly: a run again keeps a playbook's profile steps and the
// scrapes their cost reads "before" from, each without its `when` (the
// click is the condition); a playbook with no profile step gives nothing.
func TestProfileOnly(t *testing.T) {
	when := &playbooks.Condition{Source: `steps.triage.verdict == "unexplained"`}
	p := &playbooks.Plan{Playbook: "vllm-high-ttft", Steps: []playbooks.PlannedStep{
		{ID: "snapshot", Kind: "prometheus"}, {ID: "scrape", Kind: stepKindScrape, When: when}, {ID: "triage", Kind: "triage"},
		{ID: "traces", Kind: "traces", When: when}, {ID: "profile", Kind: stepKindProfile, When: when}}}
	q := profileOnly(p)
	if q == nil || len(q.Steps) != 2 || q.Steps[0].ID != "scrape" || q.Steps[1].ID != "profile" {
		t.Fatalf("cut plan %+v, want scrape and profile", q)
	}
	for _, st := range q.Steps {
		if st.When != nil {
			t.Errorf("step %s keeps its when", st.ID)
		}
	}
	if p.Steps[4].When == nil || len(p.Steps) != 5 {
		t.Error("the playbook's own plan was changed")
	}
	if profileOnly(&playbooks.Plan{Steps: []playbooks.PlannedStep{{ID: "scrape", Kind: stepKindScrape}}}) != nil {
		t.Error("a plan without a profile step was kept")
	}
}
