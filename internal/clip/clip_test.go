package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short enough", "abc", 3, "abc"},
		{"ascii cut", "abcdef", 4, "abcd"},
		{"cut inside a two-byte rune", "hé", 2, "h"},         // é is bytes 1–2
		{"cut after a two-byte rune", "héllo", 3, "hé"},      // the rune ends at 3
		{"cut inside a three-byte rune", "a日本", 3, "a"},      // 日 is bytes 1–3
		{"cut inside a four-byte rune", "x🙂y", 4, "x"},       // 🙂 is bytes 1–4
		{"cut right after a four-byte rune", "x🙂y", 5, "x🙂"}, // the rune ends at 5
		{"nothing fits", "日本", 2, ""},
		{"zero", "abc", 0, ""},
		{"negative", "abc", -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.s, tt.n); got != tt.want {
				t.Errorf("String(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
		})
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"one line already", "a b", 10, "a b"},
		{"white space folded", " dial tcp:\n\tconnection\r\n  refused ", 100, "dial tcp: connection refused"},
		{"cut ends in an ellipsis", "abcdefghij", 8, "abcde…"},
		{"ellipsis counted in n", "abcdefghij", 9, "abcdef…"},
		{"cut inside a rune", "ab日本語", 7, "ab…"}, // 4 bytes before the …; 日 is bytes 2–4
		{"cut after a rune", "日本語テキスト", 12, "日本語…"},
		{"too short for the ellipsis", "日本", 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Line(tt.s, tt.n); got != tt.want {
				t.Errorf("Line(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
		})
	}
}

// TestLineEveryCut cuts multi-byte text at every length: the result is valid
// UTF-8, within the bound, and a prefix of the input but for the ellipsis.
func TestLineEveryCut(t *testing.T) {
	s := "é日🙂 ü語 🙂x" + strings.Repeat("ß", 10)
	for n := 0; n <= len(s)+1; n++ {
		got := Line(s, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("Line(s, %d) = %q: not valid UTF-8 or longer than %d bytes", n, got, n)
		}
		if !strings.HasPrefix(s, strings.TrimSuffix(got, ellipsis)) {
			t.Fatalf("Line(s, %d) = %q is not a prefix of %q", n, got, s)
		}
	}
}

// TestRunesCountsCharacters: Slack's limits count characters, so a cut by
// Runes keeps n of them (the last an ellipsis), whatever their byte length.
func TestRunesCountsCharacters(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"héllo wörld", 20, "héllo wörld"},
		{"héllo wörld", 5, "héll…"},
		{"日本語テキスト", 4, "日本語…"},
		{"abc", 0, ""},
	} {
		if got := Runes(c.in, c.n); got != c.want {
			t.Errorf("Runes(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
	if got := Fold(" a\n\tb  c \r\n"); got != "a b c" {
		t.Errorf("Fold = %q, want %q", got, "a b c")
	}
}
