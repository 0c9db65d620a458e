package vocab

// Serving engines whose /metrics the metrics steps read. Each speaks its own
// dialect (metric names, labels, eras); the steps map every dialect onto the
// same canonical signals (signals.go), so triage never asks which engine.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
)

// EngineName is how the on-call writes the engine: "vLLM", "SGLang"; an
// engine not named (a step that did not say) is vLLM, the default dialect.
func EngineName(engine string) string {
	if engine == EngineSGLang {
		return "SGLang"
	}
	return "vLLM"
}

// Findings keys with which a metrics step says which dialect it read and
// what that dialect cannot tell (capture/README.md, Engine dialects).
const (
	// FindingEngine is the engine the step found: EngineVLLM or EngineSGLang.
	FindingEngine = "engine"
	// FindingEra is the engine's metric era as detected from the exposition:
	// vLLM "current" | "legacy"; SGLang "v0.3.5", "v0.3.6-v0.4", "2025",
	// "late-2025", "2026" (or "unknown" for either).
	FindingEra = "era"
	// FindingNotExposed maps a canonical signal the engine's era has no
	// series for to why, e.g. "not exposed by SGLang v0.3.6–v0.4". Triage
	// says so instead of "not measured": a gap in the dialect, not an outage.
	FindingNotExposed = "not_exposed"
	// FindingEngineExtras maps a figure the engine gives beyond the canonical
	// signals (SGLang's speculative acceptance, PD queues, retracted tokens,
	// its cache_hit_rate gauge) to its value, for the evidence only.
	FindingEngineExtras = "engine_extras"
	// FindingEngineNotes are sentences on how the dialect's figures differ
	// from vLLM's (SGLang's TTFT of non-streamed requests, say).
	FindingEngineNotes = "engine_notes"
)
