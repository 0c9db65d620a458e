// Package untrusted is the one boundary alert text crosses on its way to a
// surface. Labels and annotations are written by whoever controls a scrape
// target or a rule, so each surface has one function here that makes such
// text safe for it: Text for a terminal or a log line, Mrkdwn, Code and URL
// for Slack, Visible before HTML's own escaping. Clip bounds a value where it
// is stored for showing (see docs/safety.md).
package untrusted

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxValue is the most bytes of one label or annotation value (or name) any
// surface shows or any index holds; the alert as received is kept whole
// elsewhere (the run's manifest).
const MaxValue = 4 << 10

// MaxIndexed is the most bytes of a label value a database index holds (the
// run list's alertname): well under PostgreSQL's B-tree entry limit.
const MaxIndexed = 1 << 10

// maxMarks is how many combining marks in a row are shown on one character:
// enough for any script, too few to stack a glyph over the lines around it.
const maxMarks = 4

// Clip returns s cut to MaxValue bytes, never inside a rune, ending in a
// visible marker saying how long it was.
func Clip(s string) string { return ClipTo(s, MaxValue) }

// ClipTo is Clip to max bytes (at least the marker's length).
func ClipTo(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	marker := "…[clipped: " + strconv.Itoa(len(s)) + " bytes]"
	n := max(limit-len(marker), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + marker
}

// ClipKV returns m with every name and value clipped; m itself when nothing
// needed it, so the common case costs no copy.
func ClipKV[M ~map[string]string](m M) M {
	long := false
	for k, v := range m {
		if len(k) > MaxValue || len(v) > MaxValue {
			long = true
			break
		}
	}
	if !long {
		return m
	}
	out := make(M, len(m))
	for k, v := range m {
		out[Clip(k)] = Clip(v)
	}
	return out
}

// Text makes s safe for a terminal or a log line: one line, with control
// characters, line and paragraph separators, bidirectional overrides and
// invisible format characters shown escaped as Go's %q writes them.
func Text(s string) string { return visible(s, false) }

// Quote is Text in double quotes, with quotes and backslashes inside
// escaped, so where the value ends is never in doubt (as %q, for a label set).
func Quote(s string) string { return `"` + visible(quoteReplacer.Replace(s), false) + `"` }

// Visible is Text keeping line feeds, for surfaces where a line break cannot
// pass for the surface's own structure (a Slack section, an HTML cell).
func Visible(s string) string { return visible(s, true) }

// Mrkdwn makes s safe inside Slack mrkdwn text: Visible, then the three
// characters Slack reserves escaped (so no <!here>, <@U…>, <!subteam^…> or
// <url|link> can be written), and bare @here, @channel and @everyone, which
// Slack turns into mentions in text that is not verbatim, broken with a
// full-width at sign.
func Mrkdwn(s string) string {
	return mentions(mrkdwnReplacer.Replace(Visible(s)))
}

// Code makes s safe inside a Slack `code span`: Mrkdwn on one line, and
// backticks, which would close the span, shown as a look-alike.
func Code(s string) string {
	return strings.ReplaceAll(mentions(mrkdwnReplacer.Replace(Text(s))), "`", "ˋ")
}

// URL keeps u inside Slack's <url|name> syntax: & escaped as Slack asks, the
// delimiters, spaces and control bytes percent-encoded, anything invisible
// shown escaped.
func URL(u string) string {
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		switch c := u[i]; {
		case c == '&':
			b.WriteString("&amp;")
		case c <= ' ' || c == 0x7f || c == '<' || c == '>' || c == '|':
			b.WriteString("%" + strings.ToUpper(hex2(c)))
		default:
			b.WriteByte(c)
		}
	}
	return visible(b.String(), false)
}

// Hidden says whether r is shown escaped: it moves the cursor, ends a line,
// reorders or hides text, or is not a character at all.
func Hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' ||
		r == utf8.RuneError
}

func visible(s string, keepLF bool) string {
	if clean(s, keepLF) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	marks := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x` + hex2(s[i]))
		case r == '\n' && keepLF:
			b.WriteByte('\n')
		case Hidden(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		case unicode.In(r, unicode.Mn, unicode.Me):
			if marks++; marks <= maxMarks {
				b.WriteString(s[i : i+n])
			} else if marks == maxMarks+1 {
				b.WriteString("[…]")
			}
			i += n
			continue
		default:
			b.WriteString(s[i : i+n])
		}
		marks = 0
		i += n
	}
	return b.String()
}

// clean says whether s needs nothing escaped: the usual case, ASCII labels.
func clean(s string, keepLF bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || c == 0x7f || (c < ' ' && !(keepLF && c == '\n')) {
			return false
		}
	}
	return true
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// mentions breaks Slack's bare mentions; the escaped "<!here>" forms need no
// more than mrkdwnReplacer.
func mentions(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return mentionRe.ReplaceAllStringFunc(s, func(m string) string { return "＠" + m[1:] })
}

var (
	mrkdwnReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	quoteReplacer  = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	// mentionRe finds the mentions Slack notifies a whole channel for when
	// they are written bare, in any case.
	mentionRe = regexp.MustCompile(`(?i)@(here|channel|everyone)\b`)
)

// Key bounds a key a database index holds (a cooldown key, a fleet key) to
// MaxIndexed bytes while keeping it unique: a longer key keeps its start
// and ends in the SHA-256 of the whole, so two keys that differ only past
// the bound stay two keys.
func Key(s string) string {
	if len(s) <= MaxIndexed {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	tail := "…sha256:" + hex.EncodeToString(sum[:])
	n := MaxIndexed - len(tail)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + tail
}
