package triage

import (
	"sort"

	"github.com/autocapture/autocapture/capture/internal/views"
	"github.com/autocapture/autocapture/vocab"
)

// beyond are the structured findings triage reads beside the signals.
type beyond struct {
	peers *views.PeerView
	gpu   *views.GPUView
	// dialect is what the engine's metric dialect could not tell, and what
	// it tells beyond the canonical signals (vocab.FindingNotExposed and
	// neighbours, from the scrape of an SGLang server).
	dialect dialectView
}

// dialectView is the first metrics step's account of its engine's dialect.
type dialectView struct {
	engine     string
	notExposed map[string]string  // signal → "not exposed by SGLang v0.3.6–v0.4"
	extras     map[string]float64 // SGLang's figures beyond the signals
	notes      []string
}

// viewsOf finds the first PeerView and GPUView among the earlier steps, by
// step id, as written in this process or decoded from the run's record. A
// triage step's `from` does not limit them: they are not signals.
func viewsOf(prior map[string]*vocab.Result) beyond {
	ids := make([]string, 0, len(prior))
	for id := range prior {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var v beyond
	for _, id := range ids {
		r := prior[id]
		if r == nil {
			continue
		}
		if v.peers == nil {
			v.peers = views.Decode[views.PeerView](r.Findings[views.FindingPeers])
		}
		if v.gpu == nil {
			v.gpu = views.Decode[views.GPUView](r.Findings[views.FindingGPU])
		}
		if v.dialect.engine == "" {
			if e, _ := r.Findings[vocab.FindingEngine].(string); e != "" && e != vocab.EngineVLLM {
				v.dialect = dialectView{engine: e,
					notExposed: stringMap(r.Findings[vocab.FindingNotExposed]),
					extras:     floatMap(r.Findings[vocab.FindingEngineExtras]),
					notes:      stringList(r.Findings[vocab.FindingEngineNotes])}
			}
		}
	}
	return v
}

// stringMap reads a findings map of strings, as a step wrote it or as JSON
// decoded it.
func stringMap(v any) map[string]string {
	switch m := v.(type) {
	case map[string]string:
		return m
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, x := range m {
			if s, ok := x.(string); ok {
				out[k] = s
			}
		}
		return out
	}
	return nil
}

// stringList reads a findings list of strings, as written or JSON-decoded.
func stringList(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		var out []string
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
