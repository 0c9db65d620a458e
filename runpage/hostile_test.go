package runpage

import (
	"bytes"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/htmldoc"

	"golang.org/x/net/html"

	hostilekit "github.com/autocapture/autocapture/internal/testkit/hostile"
)

// maxPage bounds the run page of a maximal alert: every label and the
// summary at 1 MB.
const maxPage = 200 << 10

// TestPagesHostileAlert shows a run whose alertname, labels and annotations
// hold each hostile string on the run page and the run list: no markup or
// script, no control, bidi or invisible character in any text the browser
// lays out, and each page bounded.
func TestPagesHostileAlert(t *testing.T) {
	for _, hc := range hostilekit.Cases() {
		t.Run(hc.Name, func(t *testing.T) {
			f := newPageServer(t)
			v := hc.Value
			r := f.runs.runs[1]
			r.Alertname = v
			r.Labels = map[string]string{"alertname": v, "instance": v, "model_name": v, "job": v}
			r.Annotations = map[string]string{"summary": v, "description": v}
			_, page := fetch(t, f.srv.URL+"/runs/"+pageRun, nil)
			_, list := fetch(t, f.srv.URL+"/runs", nil)
			for name, body := range map[string][]byte{"run page": page, "run list": list} {
				if len(body) > maxPage {
					t.Errorf("%s is %d bytes, want at most %d", name, len(body), maxPage)
				}
				t.Logf("%s: %d bytes", name, len(body))
				checkPage(t, name, body)
			}
		})
	}
}

func checkPage(t *testing.T, name string, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte("<script")) {
		t.Fatalf("%s: a script reached the page", name)
	}
	htmldoc.Walk(htmldoc.Parse(t, body), func(n *html.Node) {
		if n.Type == html.ElementNode && (htmldoc.Attr(n, "onerror") != "" || htmldoc.Attr(n, "src") == "x") {
			t.Errorf("%s: an injected element <%s %v>", name, n.Data, n.Attr)
		}
		if n.Type != html.TextNode {
			return
		}
		if err := hostilekit.Controls(strings.ReplaceAll(n.Data, "\t", " "), true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := hostilekit.Marks(n.Data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}
