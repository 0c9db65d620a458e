// Package clip shortens text for places that show it on one line: error
// reasons in API answers, findings in threads. It never cuts a UTF-8 sequence.
package clip

import (
	"strings"
	"unicode/utf8"
)

// ellipsis ends a line Line has cut.
const ellipsis = "…"

// String returns s cut to at most n bytes, never inside a rune.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Fold puts s on one line: every run of white space (newlines included)
// becomes one space, none at either end.
func Fold(s string) string { return strings.Join(strings.Fields(s), " ") }

// Runes returns s cut to at most n characters (runes), for limits counted in
// characters (Slack's); one it had to cut ends in "…".
func Runes(s string, n int) string {
	if n < 1 {
		return ""
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + ellipsis
}

// Line returns s on one line, every run of white space (newlines included)
// made one space, and at most n bytes long; a line it had to cut ends in "…".
func Line(s string, n int) string {
	s = Fold(s)
	if len(s) <= n {
		return s
	}
	if n < len(ellipsis) {
		return String(s, n)
	}
	return String(s, n-len(ellipsis)) + ellipsis
}
