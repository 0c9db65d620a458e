package slack

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/vocab"
)

// scopedVerdict is an overload on one instance of six.
var scopedVerdict = &vocab.Verdict{ID: vocab.VerdictOverload, Scope: vocab.ScopeSingle,
	Contributing: []string{vocab.FactorSingleInstance},
	Evidence:     []string{"queue 48 waiting (threshold 10)", "only this instance: queue 48 vs peers' median 0 (5 peers)"},
	Advice:       []string{"route traffic to other instances or scale out"}}

const scopeWant = "scope: single-instance — only this instance: queue 48 vs peers' median 0 (5 peers)"

func TestParentShowsScopeAndKeepsItThroughMetadata(t *testing.T) {
	p := testParent().Apply(notify.Summary{Key: notify.KeyCloseFinished, Status: "succeeded", Duration: time.Minute, Verdict: scopedVerdict})
	raw, _ := json.Marshal(RenderParent(p))
	if !strings.Contains(string(raw), scopeWant) {
		t.Errorf("parent lacks %q:\n%s", scopeWant, raw)
	}
	b, _ := json.Marshal(parentPayload(p))
	var payload map[string]any
	_ = json.Unmarshal(b, &payload)
	back, _ := json.Marshal(RenderParent(parentFromPayload("r1", payload)))
	if string(back) != string(raw) {
		t.Errorf("scope lost through metadata:\n%s\n%s", raw, back)
	}
}

func TestVerdictReplyShowsScopeAndFactorAdvice(t *testing.T) {
	m := RenderReply(notify.StepReport{StepID: "triage", Kind: "triage", Tier: vocab.TierTriage, Status: "succeeded", Verdict: scopedVerdict})
	raw, _ := json.Marshal(m)
	for _, want := range []string{scopeWant, vocab.FactorAdvice(vocab.FactorSingleInstance)[0]} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("reply lacks %q:\n%s", want, raw)
		}
	}
}

// TestVerdictSaysTheScopeOnce: the scope's evidence line is the scope
// line's detail; the verdict's list does not repeat it.
func TestVerdictSaysTheScopeOnce(t *testing.T) {
	line := "only this instance: queue 48 vs peers' median 0 (5 peers)"
	v := &vocab.Verdict{ID: vocab.VerdictOverload, Scope: vocab.ScopeSingle,
		Evidence: []string{"queue 48 (threshold 10)", line}}
	got := verdictDetail(v)
	if n := strings.Count(got, "only this instance"); n != 1 {
		t.Errorf("the scope said %d times:\n%s", n, got)
	}
	if !strings.Contains(got, "queue 48 (threshold 10)") {
		t.Errorf("the other evidence is gone:\n%s", got)
	}
}
