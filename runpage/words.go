package runpage

import (
	"html/template"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/vocab"
)

// Identifiers the run page shows in words: a verdict's basis (which
// comparison judged each signal) and step statuses; and storage keys and
// file names that wrap only between their parts.

// stepStatusText is a step's status as the page says it; a status the page
// does not know reads as it is (and its badge is grey: stateClass).
func stepStatusText(status vocab.Status) string {
	if status == vocab.StatusNotConfigured {
		return "not configured"
	}
	return string(status)
}

// signalWords are the signals a verdict's basis names, in words.
var signalWords = map[string]string{
	vocab.SigPrefillMean:     "mean prefill time",
	vocab.SigPromptTokens:    "mean prompt length",
	vocab.SigPromptTokensNow: "prompt length now",
	vocab.SigTTFTP99:         "p99 time to first token",
	vocab.SigITLP99:          "p99 inter-token latency",
	vocab.SigDecodeMean:      "mean decode time",
	vocab.SigQueueTimeMean:   "mean queue time",
	vocab.SigOutputTokens:    "mean output length",
}

// basisWords are how a signal was judged (vocab.Basis…), in words.
var basisWords = map[string]string{
	vocab.BasisBefore:   "against its own window before the alert",
	vocab.BasisDay:      "against the same window a day earlier",
	vocab.BasisAbsolute: "absolute threshold (no baseline)",
}

// basisInWords is a verdict's basis, each signal and its comparison in
// words ("mean prefill time", "absolute threshold (no baseline)"), in the
// order of the signals' names; an unknown signal reads with spaces for
// underscores, an unknown comparison as it is.
func basisInWords(basis map[string]string) []kv {
	keys := make([]string, 0, len(basis))
	for k := range basis {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]kv, 0, len(keys))
	for _, k := range keys {
		sig, ok := signalWords[k]
		if !ok {
			sig = strings.ReplaceAll(k, "_", " ")
		}
		how, ok := basisWords[basis[k]]
		if !ok {
			how = basis[k]
		}
		out = append(out, kv{sig, how})
	}
	return out
}

// keySegments is a storage key, escaped, each of its parts (up to and
// with its slash) in a span.seg that the CSS keeps whole while it fits a
// line: a long key wraps between its parts, never inside a run id; a part
// longer than a line (a trace file's name) wraps as nameBreaks lets it.
func keySegments(key string) template.HTML {
	var b strings.Builder
	for rest := key; rest != ""; {
		part := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			part = rest[:i+1]
		}
		rest = rest[len(part):]
		b.WriteString(`<span class="seg">` + string(nameBreaks(part)) + `</span>`)
	}
	return template.HTML(b.String()) //nolint:gosec // each part escaped by nameBreaks
}

// nameBreaks is a file name, escaped, with a line break allowed after each
// dot and underscore (<wbr>): a long trace file's name wraps between its
// parts.
func nameBreaks(name string) template.HTML {
	var b strings.Builder
	for _, r := range name {
		b.WriteString(template.HTMLEscapeString(string(r)))
		if r == '.' || r == '_' {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String()) //nolint:gosec // each rune escaped above
}
