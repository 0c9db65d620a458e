package storage

import (
	"fmt"
	"strings"
	"unicode"
)

// maxSegment bounds one key segment; label values can be arbitrarily long.
const maxSegment = 128

// Segment makes one safe key segment from untrusted text (an alert label, a step
// id): anything outside [A-Za-z0-9._-] becomes '_', leading dots are dropped (no
// "..", no hidden files), and an empty result becomes "_".
func Segment(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)), r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= maxSegment {
			break
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if out == "" {
		return "_"
	}
	return out
}

// Key joins segments, each made safe with Segment, into a relative slash-separated key.
func Key(parts ...string) string {
	safe := make([]string, len(parts))
	for i, p := range parts {
		safe[i] = Segment(p)
	}
	return strings.Join(safe, "/")
}

// ValidKey rejects keys that could escape the store: empty, absolute, with ".."
// or "." segments, empty segments, backslashes or control characters.
func ValidKey(key string) error {
	if key == "" {
		return fmt.Errorf("storage: empty key")
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("storage: key %q is absolute", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("storage: key %q has a control character or backslash", key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("storage: key %q has an empty, '.' or '..' segment", key)
		}
	}
	return nil
}
