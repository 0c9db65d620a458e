package triage

import (
	"sort"

	"github.com/autocapture/autocapture/vocab"
)

// mergedSignals merges the signals of the named prior results in order (earlier
// wins). With no names it takes every prior result with signals, PromQL
// sources first, then the rest, each group by step id. It returns the ids used.
func mergedSignals(prior map[string]*vocab.Result, from []string) (vocab.Signals, []string) {
	ids := from
	if len(ids) == 0 {
		for id, r := range prior {
			if r != nil && len(r.Signals) > 0 {
				ids = append(ids, id)
			}
		}
		rank := func(id string) int {
			if prior[id].Findings["source"] == vocab.SourcePromQL {
				return 0
			}
			return 1
		}
		sort.Slice(ids, func(i, j int) bool {
			if ri, rj := rank(ids[i]), rank(ids[j]); ri != rj {
				return ri < rj
			}
			return ids[i] < ids[j]
		})
	}
	out := vocab.Signals{}
	var used []string
	for _, id := range ids {
		if r := prior[id]; r != nil && len(r.Signals) > 0 {
			out.Merge(r.Signals)
			used = append(used, id)
		}
	}
	return out, used
}
