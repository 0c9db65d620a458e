package vocab

import (
	"slices"
	"strings"
	"testing"
)

func TestFactorAdviceForEveryScopeFactor(t *testing.T) {
	for _, f := range []string{FactorSingleInstance, FactorFleetWide, FactorRoutingImbalance} {
		if len(FactorAdvice(f)) == 0 {
			t.Errorf("%s: no advice", f)
		}
		if slices.Contains(Verdicts, f) {
			t.Errorf("%s is a verdict id: a factor must not be", f)
		}
	}
	words := map[string]string{FactorSingleInstance: "route", FactorFleetWide: "roll back", FactorRoutingImbalance: "session affinity"}
	for f, w := range words {
		if !strings.Contains(strings.Join(FactorAdvice(f), " "), w) {
			t.Errorf("%s advice %q does not say %q", f, FactorAdvice(f), w)
		}
	}
}
