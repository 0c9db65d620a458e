package notify

import (
	"slices"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// SameVerdict says whether two verdicts name the same cause and the same
// contributing causes (evidence lines and ages may differ). The scope's
// factors (single-instance, fleet-wide, routing-imbalance) say where, not
// what: a refined verdict that only adds them, once the peers step answered,
// is the same verdict.
func SameVerdict(a, b *vocab.Verdict) bool {
	if a == nil || b == nil {
		return a == b
	}
	causes := func(v *vocab.Verdict) []string {
		out := slices.DeleteFunc(slices.Clone(v.Contributing), func(c string) bool { return vocab.FactorAdvice(c) != nil })
		slices.Sort(out)
		return out
	}
	return a.ID == b.ID && slices.Equal(causes(a), causes(b))
}

// VerdictChange says how a refined verdict differs from the preliminary one
// a thread showed first: "was overload, now kv-pressure (also overload): KV
// cache 99 % full".
func VerdictChange(was, now *vocab.Verdict) string {
	s := "was " + verdictName(was) + ", now " + verdictName(now)
	if len(now.Evidence) > 0 {
		s += ": " + now.Evidence[0]
	}
	return s
}

// verdictName is a verdict's id and contributing factors in one phrase.
func verdictName(v *vocab.Verdict) string {
	if len(v.Contributing) == 0 {
		return v.ID
	}
	return v.ID + " (also " + strings.Join(v.Contributing, ", ") + ")"
}

// EditOnly says whether an update only edits the parent, with no reply of
// its own: the verdict's edits (preliminary, refined, profiled) and a group's.
func EditOnly(key string) bool {
	return VerdictEdit(key) || key == KeyGroupUpdate || strings.HasPrefix(key, KeyActionEdit)
}

// VerdictEdit says whether an update is one of the verdict's edits of the
// parent: preliminary, refined, or refined by a profile.
func VerdictEdit(key string) bool {
	return key == KeyCloseVerdict || key == KeyCloseVerdictPreliminary || strings.HasPrefix(key, KeyCloseVerdictProfiled+"/")
}
