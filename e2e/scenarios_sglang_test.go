package e2e

import (
	"testing"

	"github.com/autocapture/autocapture/vllmsim"
)

// TestSGLangVerdictPerInjectedCause is TestVerdictPerInjectedCause on SGLang
// servers of the 2026 era (vllmsim --engine sglang): from the start, each sim
// serves its cause, the shipped SGLang rules fire through the real Prometheus
// and Alertmanager, every run of the shipped SGLang playbooks names the cause
// in SGLang's words (checkSGLangWords), the healthy instance fires nothing,
// and tier 2 runs exactly when the verdict is unexplained and returns the
// sim's truly slowest requests from SGLang's Req spans (service "sglang",
// the traces step's engine: sglang) in the stack's one Jaeger.
func TestSGLangVerdictPerInjectedCause(t *testing.T) {
	t.Parallel()
	s, all := verdictPerInjectedCause(t, sglangSuffix, nil)
	byAddr := map[string]string{}
	for sc, sm := range s.Sims {
		byAddr[sm.Addr] = sc
	}
	for _, lr := range all {
		sc := byAddr[lr.Labels["instance"]]
		if cause, _ := simVariant(sc); sc == "" || cause == vllmsim.ScenarioHealthy { // verdictPerInjectedCause said so
			continue
		}
		r := s.run(t, lr.ID)
		if r.Verdict == nil || r.Status == "skipped" {
			continue
		}
		checkSGLangWords(t, sc, r, "2026", nil)
	}
}
