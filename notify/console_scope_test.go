package notify

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

func TestConsoleShowsScopeAndFactorAdvice(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out)
	v := &vocab.Verdict{ID: vocab.VerdictOverload, Scope: vocab.ScopeFleet, Contributing: []string{vocab.FactorFleetWide},
		Evidence: []string{"queue 48 waiting (threshold 10)", "fleet-wide: 5 of 6 instances have queue >= 10"}}
	if err := c.Close(context.Background(), Thread{TS: "r1"}, Summary{RunID: "r1", Status: "succeeded", Verdict: v}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"   scope: fleet-wide — fleet-wide: 5 of 6 instances have queue >= 10\n",
		"→ " + vocab.FactorAdvice(vocab.FactorFleetWide)[0]} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console lacks %q:\n%s", want, out.String())
		}
	}
}

// TestConsoleSaysTheScopeOnce: the scope line printed above the evidence is
// not printed again as one of its bullets, measured or not.
func TestConsoleSaysTheScopeOnce(t *testing.T) {
	for _, v := range []*vocab.Verdict{
		{ID: vocab.VerdictUnexplained, Evidence: []string{"TTFT p99 5 s (threshold 2 s)", "scope not measured: no peers step"}},
		{ID: vocab.VerdictOverload, Scope: vocab.ScopeFleet, Evidence: []string{"queue 48 waiting (threshold 10)", "fleet-wide: 5 of 6 instances have queue >= 10"}},
	} {
		var out bytes.Buffer
		if err := NewConsole(&out).Close(context.Background(), Thread{TS: "r1"}, Summary{RunID: "r1", Status: "succeeded", Verdict: v}); err != nil {
			t.Fatal(err)
		}
		scope := vocab.ScopeLine(v)
		if n := strings.Count(out.String(), strings.TrimPrefix(scope, "scope not measured: ")); n != 1 {
			t.Errorf("%q said %d times, want once:\n%s", scope, n, out.String())
		}
		if !strings.Contains(out.String(), "· "+v.Evidence[0]) {
			t.Errorf("the other evidence is gone:\n%s", out.String())
		}
	}
}
