package untrusted

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKeyBoundsAndKeepsKeysApart(t *testing.T) {
	short := "pb/{instance=\"10.0.0.1:8000\"}"
	if Key(short) != short {
		t.Errorf("a short key changed: %q", Key(short))
	}
	long := strings.Repeat("é", MaxIndexed) // two bytes a rune
	a, b := Key(long+"a"), Key(long+"b")
	if len(a) > MaxIndexed || len(b) > MaxIndexed || !utf8.ValidString(a) {
		t.Errorf("keys of %d and %d bytes (valid UTF-8: %v), want at most %d", len(a), len(b), utf8.ValidString(a), MaxIndexed)
	}
	if a == b {
		t.Error("two keys that differ past the bound became one")
	}
	if Key(long+"a") != a {
		t.Error("the same key bounded twice differs")
	}
}
