package vllm_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/playbooks/playtest"
)

// This package's tests see only the real step kinds (capture's init), so the
// schema generated here is the one to commit.

var update = flag.Bool("update", false, "rewrite ../schema.json")

func TestSchemaIsCurrent(t *testing.T) {
	got, err := playbooks.Schema()
	if err != nil {
		t.Fatal(err)
	}
	const path = "../schema.json"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./playbooks/vllm -run Schema -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("playbooks/schema.json is stale: run go test ./playbooks/vllm -run Schema -update")
	}
}

func TestShippedPlaybooksLoadAndPassTheirTests(t *testing.T) {
	set, err := playbooks.Load(playbooks.Shipped, zap.NewNop())
	if err != nil {
		t.Fatalf("shipped playbooks: %v", err)
	}
	for _, f := range set.Files {
		if !playbooks.IsShipped(f) || !strings.HasSuffix(f, ".yaml") {
			t.Errorf("embedded file %q", f)
		}
	}
	if len(set.Tests) < 30 { // 35 when written: a loader leaving them out must not pass with none
		t.Fatalf("the shipped set holds %d test cases", len(set.Tests))
	}
	for _, tc := range set.Tests {
		t.Run(tc.Name, func(t *testing.T) {
			o := playtest.Run(context.Background(), tc, nil, zap.NewNop())
			for _, f := range o.Failures {
				t.Errorf("%s: %s", o.Where(), f)
			}
		})
	}
}
