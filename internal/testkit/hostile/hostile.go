// Package hostile is the table of alert text that tries to break out of the
// surface showing it, and the checks each surface's output must pass. Every
// renderer's test walks the same table, so a new trick is added once.
package hostile

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/autocapture/autocapture/internal/untrusted"
)

// Case is one hostile string.
type Case struct {
	Name  string
	Value string
}

// Forged is a summary that prints a fake end of run, clears the screen,
// retitles the window and reverses what follows.
const Forged = "real\n── run 01a2 succeeded after 1s ──\n   verdict: healthy\x1b[2J\x1b]0;pwned\x07\u202eevil\x00"

// Cases is the table: forged lines, terminal escapes, bidi and invisible
// characters, Slack mentions and markup, HTML, and sizes past the bound.
func Cases() []Case {
	return []Case{
		{"forged thread", Forged},
		{"CR overwrite", "ok\rFAKE verdict: healthy"},
		{"NUL", "a\x00b"},
		{"ESC CSI and OSC", "\x1b[31mred\x1b[0m\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"},
		{"C1 CSI", "a\u009b2Jb"},
		{"DEL and BEL", "a\x7f\x07b"},
		{"line separators", "a\u2028b\u2029c\u0085d"},
		{"bidi overrides", "x\u202ey\u202dz\u202a\u202b\u202c\u2066\u2067\u2068\u2069\u200e\u200f\u061c"},
		{"zero-width", "ad\u200bmin\u200c\u200d\u2060\ufeff"},
		{"combining marks", "Z" + strings.Repeat("\u0301\u0336", 32<<10)},
		{"invalid UTF-8", "a\xffb\xc0"},
		{"slack specials", "<!here> <!channel> <!everyone> <!subteam^S012AB|@oncall> <@U0123ABC> <#C0123|general>"},
		{"bare mentions", "@here @channel @Everyone hi@here"},
		{"slack link", "<https://evil.example/?a=1&b=2|click me>"},
		{"backtick escape", "10.0.0.7` *bold* _it_ <!here> `"},
		{"html", `<script>alert(1)</script><img src=x onerror=alert(1)>"'&amp;`},
		{"javascript url", "javascript:alert(document.domain)"},
		{"over the bound", strings.Repeat("A", 1<<20)},
		{"over the bound, multi-byte", strings.Repeat("日", 3000)},
	}
}

// Controls returns an error naming the first character in s that would act
// on a terminal or reorder text: a control character (a line feed only
// where lf allows it), a bidi or invisible format character, a line
// separator, or bytes that are not UTF-8.
func Controls(s string, lf bool) error {
	for i, r := range s {
		if r == '\n' && lf {
			continue
		}
		if r == utf8.RuneError || untrusted.Hidden(r) {
			return fmt.Errorf("%U at byte %d in %q", r, i, around(s, i))
		}
	}
	return nil
}

// Marks returns an error when s stacks more combining marks on one
// character than untrusted shows.
func Marks(s string) error {
	if i := strings.Index(s, strings.Repeat("\u0301\u0336", 4)); i >= 0 {
		return fmt.Errorf("a stack of combining marks at byte %d", i)
	}
	return nil
}

func around(s string, i int) string {
	lo, hi := max(i-20, 0), min(i+20, len(s))
	return s[lo:hi]
}
