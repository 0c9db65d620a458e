package untrusted

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if s := strings.Repeat("a", MaxValue); Clip(s) != s {
		t.Error("a value at the bound was changed")
	}
	for _, s := range []string{strings.Repeat("a", MaxValue+1), strings.Repeat("日", 1<<18)} {
		got := Clip(s)
		if len(got) > MaxValue || !utf8.ValidString(got) || !strings.HasSuffix(got, "bytes]") ||
			!strings.Contains(got, "clipped: "+strconv.Itoa(len(s))) || !strings.HasPrefix(s, strings.TrimSuffix(got, got[strings.Index(got, "…[clipped"):])) {
			t.Errorf("Clip of %d bytes = %d bytes ending %q", len(s), len(got), got[max(len(got)-40, 0):])
		}
	}
}

func TestClipKV(t *testing.T) {
	small := map[string]string{"a": "b"}
	if got := ClipKV(small); len(got) != 1 || got["a"] != "b" {
		t.Errorf("small map changed: %v", got)
	}
	big := map[string]string{"a": strings.Repeat("x", 1<<20), strings.Repeat("k", 5000): "v"}
	got := ClipKV(big)
	if len(big["a"]) != 1<<20 {
		t.Error("ClipKV changed its argument")
	}
	for k, v := range got {
		if len(k) > MaxValue || len(v) > MaxValue {
			t.Errorf("entry %d/%d bytes past the bound", len(k), len(v))
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain 10.0.0.7:8000", "plain 10.0.0.7:8000"},
		{"a\nb\rc\td", `a\nb\rc\td`},
		{"\x1b[2J\x00\x07\x7f", `\x1b[2J\x00\a\x7f`},
		{"x\u202ey\u2066z\u200d", `x\u202ey\u2066z\u200d`},
		{"a\u2028b", `a\u2028b`},
		{"bad\xff", `bad\xff`},
		{"café 日本", "café 日本"},
		{"e" + strings.Repeat("\u0301", 10) + "f\u0301", "e\u0301\u0301\u0301\u0301[…]f\u0301"},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got, want := Quote("a\"b\\c\nd\u202e"), `"a\"b\\c\nd\u202e"`; got != want {
		t.Errorf("Quote = %s, want %s", got, want)
	}
	if got := Visible("a\nb\rc"); got != "a\nb\\rc" {
		t.Errorf("Visible kept %q", got)
	}
}

func TestMrkdwn(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<!here> & <@U1>", "&lt;!here&gt; &amp; &lt;@U1&gt;"},
		{"<!subteam^S1|@team>", "&lt;!subteam^S1|@team&gt;"},
		{"ping @here and @CHANNEL, @everyone", "ping ＠here and ＠CHANNEL, ＠everyone"},
		{"@heretic", "@heretic"},
		{"x\u202ey\nz", "x\\u202ey\nz"},
	}
	for _, tt := range tests {
		if got := Mrkdwn(tt.in); got != tt.want {
			t.Errorf("Mrkdwn(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Code("a` *b* <!here>\nc"); got != "aˋ *b* &lt;!here&gt;\\nc" {
		t.Errorf("Code = %q", got)
	}
}

func TestURL(t *testing.T) {
	got := URL("https://g.example/graph?g0.expr=a>b&x=1|2 <3>\x00")
	if want := "https://g.example/graph?g0.expr=a%3Eb&amp;x=1%7C2%20%3C3%3E%00"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}
