package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs are read by scanning: a table cell says one thing, a paragraph
// one point. Longer text goes under a heading of its own or into a list.
const (
	docsMaxCellChars      = 400
	docsMaxParagraphWords = 150
)

// TestDocsScan: no table cell over docsMaxCellChars characters and no
// paragraph (a list item counts as one) over docsMaxParagraphWords words in
// README.md and docs/*.md, generated references included.
func TestDocsScan(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{readmeFile}, files...)
	if len(files) < 10 {
		t.Fatalf("found %v: not the docs folder", files)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range overLong(string(raw)) {
			t.Errorf("%s:%s", strings.TrimPrefix(f, "../../"), p)
		}
	}
}

func TestOverLong(t *testing.T) {
	words := func(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }
	cell := strings.Repeat("x", docsMaxCellChars+1)
	doc := strings.Join([]string{
		"# Title", "",
		words(100), words(51), "", // one paragraph over two lines: 151 words
		words(150), "", // at the bound
		"- " + words(80), "  " + words(80), // a list item and its continuation
		"- " + words(10),
		"```", words(400), "```", // code is not prose
		"<!--", words(400), "-->", // nor a comment
		"| a | b |", "|---|---|",
		"| `x \\| y` | " + cell + " |",
		"| " + strings.Repeat("y", docsMaxCellChars) + " | z |",
		"> " + words(151),
	}, "\n")
	got := overLong(doc)
	want := []string{
		"3: a paragraph of 151 words (at most 150)",
		"8: a paragraph of 161 words (at most 150)",
		"19: a table cell of 401 characters (at most 400)",
		"21: a paragraph of 151 words (at most 150)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var (
	listItem = regexp.MustCompile(`^\s*([-*+]|\d+[.)])\s`)
	// cellSep splits a table row at the pipes that are not escaped.
	cellSep = regexp.MustCompile(`(^|[^\\])\|`)
)

// overLong lists the over-long cells and paragraphs of a Markdown text, each
// as "line: what". Fenced code and HTML comments are skipped.
func overLong(doc string) []string {
	var out []string
	words, start := 0, 0
	flush := func() {
		if words > docsMaxParagraphWords {
			out = append(out, fmt.Sprintf("%d: a paragraph of %d words (at most %d)", start, words, docsMaxParagraphWords))
		}
		words = 0
	}
	fence, comment := false, false
	for i, l := range strings.Split(doc, "\n") {
		n, trimmed := i+1, strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fence = !fence
		case fence:
		case comment || strings.HasPrefix(trimmed, "<!--"):
			flush()
			comment = !strings.Contains(trimmed, "-->")
		case strings.HasPrefix(trimmed, "|"):
			flush()
			for _, c := range cellSep.Split(trimmed, -1) {
				if c = strings.TrimSpace(c); len([]rune(c)) > docsMaxCellChars {
					out = append(out, fmt.Sprintf("%d: a table cell of %d characters (at most %d)", n, len([]rune(c)), docsMaxCellChars))
				}
			}
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			flush()
		default:
			if listItem.MatchString(l) || words == 0 {
				flush()
				start = n
			}
			words += len(strings.Fields(strings.TrimLeft(trimmed, ">")))
		}
	}
	flush()
	return out
}
