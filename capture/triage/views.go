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
	}
	return v
}
