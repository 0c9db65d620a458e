package capture

import (
	"fmt"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// signalOrder is how summary lines list signals: the load picture first.
var signalOrder = []string{vocab.SigQueueDepth, vocab.SigRunning, vocab.SigKVUsage, vocab.SigPreemptionsRate,
	vocab.SigTTFTP99, vocab.SigITLP99, vocab.SigQueueTimeMean, vocab.SigPrefillMean, vocab.SigDecodeMean,
	vocab.SigPromptTokens, vocab.SigAbortRatio}

// signalLine renders the main signals compactly for a summary line.
func signalLine(s vocab.Signals) string {
	var parts []string
	for _, name := range signalOrder {
		if v, ok := s[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", name, formatNumber(v)))
		}
	}
	if len(parts) == 0 {
		return "no vLLM signals"
	}
	return strings.Join(parts, " · ")
}

// formatNumber prints a value with three significant digits, integers plainly.
func formatNumber(v float64) string {
	if v == float64(int64(v)) && v < 1e9 && v > -1e9 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3g", v)
}

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
