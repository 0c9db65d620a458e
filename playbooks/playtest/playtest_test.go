package playtest

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
)

func TestRunCases(t *testing.T) {
	set, err := playbooks.LoadFiles([]string{"testdata/cases.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Tests) != 3 {
		t.Fatalf("got %d cases, want 3", len(set.Tests))
	}
	for _, tc := range []struct {
		name  string
		where string
		fails []string
	}{
		{"kv pressure gives kv-pressure", "testdata/cases.yaml:16", nil},
		{"deliberately wrong expectations", "testdata/cases.yaml:30", []string{
			"ran [scrape slow snapshot triage], want [scrape snapshot triage]",
			"verdict unexplained, want kv-pressure",
			`summary of slow is "3 slow spans", want it to contain "5 slow"`,
		}},
		{"unmocked network step fails without a network", "testdata/cases.yaml:41", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *playbooks.TestCase
			for _, x := range set.Tests {
				if x.Name == tc.name {
					c = x
				}
			}
			o := Run(context.Background(), c, nil, zap.NewNop())
			if o.Where() != tc.where {
				t.Errorf("where %s, want %s", o.Where(), tc.where)
			}
			if len(o.Failures) != len(tc.fails) {
				t.Fatalf("failures:\n%s\nwant %d", strings.Join(o.Failures, "\n"), len(tc.fails))
			}
			for i, f := range tc.fails {
				if !strings.HasPrefix(o.Failures[i], f) {
					t.Errorf("failure %d: %q, want prefix %q", i, o.Failures[i], f)
				}
			}
		})
	}
}
