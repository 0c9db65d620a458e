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
