// Package htmldoc reads a served page as a browser does, for tests: parsed,
// walked, its elements found by id or tag, its text and links read back.
package htmldoc

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// Parse parses a page.
func Parse(t testing.TB, b []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// Walk calls f on n and everything under it, in document order.
func Walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		Walk(c, f)
	}
}

// Attr is n's attribute name, "" when it has none.
func Attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

// ByID is the first element whose id is id, nil if none.
func ByID(doc *html.Node, id string) *html.Node {
	var out *html.Node
	Walk(doc, func(n *html.Node) {
		if out == nil && n.Type == html.ElementNode && Attr(n, "id") == id {
			out = n
		}
	})
	return out
}

// Text is n's text, its whitespace runs as one space; "" for nil.
func Text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	Walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data + " ")
		}
	})
	return strings.Join(strings.Fields(b.String()), " ")
}

// Elements are the elements tag under doc (none under nil).
func Elements(doc *html.Node, tag string) []*html.Node {
	var out []*html.Node
	if doc == nil {
		return nil
	}
	Walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == tag {
			out = append(out, n)
		}
	})
	return out
}

// Cells is the text of each table cell under n as a browser reads it: its
// text nodes joined as they are (a key or a name split into parts to wrap
// between them, <wbr> or span.seg, reads whole).
func Cells(n *html.Node) []string {
	var out []string
	for _, td := range Elements(n, "td") {
		var b strings.Builder
		Walk(td, func(c *html.Node) {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
		})
		out = append(out, strings.TrimSpace(b.String()))
	}
	return out
}

// Resolve is href as a browser resolves it against the page's URL.
func Resolve(t testing.TB, page, href string) string {
	t.Helper()
	base, err := url.Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := url.Parse(href)
	if err != nil {
		t.Fatalf("href %q: %v", href, err)
	}
	return base.ResolveReference(ref).String()
}
