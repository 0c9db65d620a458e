package storage

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// Path traversal through label values into keys (issue 15, "Hostile
// input"). key_artifact_test.go proves the keys ArtifactKey makes are valid
// and single-segment for each field; local_test.go that ValidKey refuses the
// classic escapes. Here the stores themselves: a hostile label made into a
// key lands under the store's root (Local: checked on the filesystem) or
// under its prefix (S3: checked by listing the bucket), and a raw escaping
// key or prefix handed to any method is refused with nothing touched.

// hostileLabels are label values an alert can carry.
var hostileLabels = []string{
	"../../etc", "..", ".", "..%2f..%2fetc", "%2e%2e%2f%2e%2e%2f", "/abs/path", "a/../../b", `..\..\windows`,
	"nul\x00byte", "line\nbreak", strings.Repeat("long", 2000), strings.Repeat("../", 300),
	"\u2024\u2024/\u2024\u2024", "\uff0e\uff0e\uff0f\uff0e\uff0e", "\u2025/etc", "..\u2215..\u2215etc", "~/.ssh", ".hidden",
}

// escapingKeys are raw keys no method may accept.
var escapingKeys = []string{
	"../outside", "a/../../outside", "/abs", "..", ".", "a/./b", "a//b", "a/", `a\..\..\outside`, "a\x00b", "artifacts/../../outside",
}

// tree lists every file and folder under dir (relative, slash-separated).
func tree(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hostilePaths() []ArtifactPath {
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var out []ArtifactPath
	for _, h := range hostileLabels {
		out = append(out, ArtifactPath{Started: started, Alertname: h, RunID: "r1", Plan: "p", Step: "s", File: "f.json"},
			ArtifactPath{Started: started, Alertname: "A", RunID: "r1", Plan: h, Step: h, File: h})
	}
	return out
}

// TestLocalKeepsHostileLabelsUnderItsRoot: every hostile label, made into an
// artifact key, is stored under the root and nowhere else; the folder around
// the root holds exactly what it held.
func TestLocalKeepsHostileLabelsUnderItsRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "store")
	s, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	puts := 0
	for _, p := range hostilePaths() {
		key := ArtifactKey(p)
		if _, err := s.Put(ctx, key, strings.NewReader("{}"), vocab.ObjectMeta{ContentType: "application/json"}); err != nil {
			t.Errorf("Put(%q) for %+v: %v", key, p, err)
			continue
		}
		puts++
	}
	if got := tree(t, parent); len(got) != 1+len(tree(t, root)) || !got["store"] {
		t.Errorf("the folder around the root holds %v, want only store/", got)
	}
	listed := 0
	if err := s.List(ctx, "", func(e vocab.ListEntry) error {
		listed++
		if ValidKey(e.Key) != nil || !strings.HasPrefix(e.Key, "2026/12/01/") {
			t.Errorf("listed %q", e.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if listed != puts || puts != 2*len(hostileLabels) {
		t.Errorf("%d puts, %d listed, want %d each", puts, listed, 2*len(hostileLabels))
	}
	t.Logf("%d hostile keys stored, all under the root", puts)
}

// TestLocalRefusesEscapingKeys: a raw key that could leave the root is
// refused by every method, and a file beside the root is neither read,
// replaced, listed nor deleted. (List("../") walked beside the root and
// yielded "../outside" until List checked its prefix: ValidPrefix.)
func TestLocalRefusesEscapingKeys(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "store")
	s, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(parent, "outside")
	if err := os.WriteFile(victim, []byte("not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := tree(t, parent)
	ctx := context.Background()
	for _, k := range escapingKeys {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), vocab.ObjectMeta{}); err == nil {
			t.Errorf("Put(%q) accepted", k)
		}
		if _, err := s.Stat(ctx, k); err == nil {
			t.Errorf("Stat(%q) accepted", k)
		}
		if rc, err := s.Open(ctx, k); err == nil {
			rc.Close()
			t.Errorf("Open(%q) accepted", k)
		}
		if _, _, err := s.Link(ctx, k); err == nil {
			t.Errorf("Link(%q) accepted", k)
		}
		if err := s.Delete(ctx, k); err == nil {
			t.Errorf("Delete(%q) accepted", k)
		}
	}
	for _, prefix := range []string{"../", "../out", "a/../../", "/", `..\`} {
		err := s.List(ctx, prefix, func(e vocab.ListEntry) error {
			t.Errorf("List(%q) yielded %q", prefix, e.Key)
			return nil
		})
		if err == nil {
			t.Errorf("List(%q) accepted an escaping prefix", prefix)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not yours" {
		t.Fatalf("the file beside the root: %q, %v", b, err)
	}
	after := tree(t, parent)
	for p := range after {
		if !before[p] && p != "store" && !strings.HasPrefix(p, "store/") {
			t.Errorf("%s appeared beside the root", p)
		}
	}
}

// TestS3KeepsHostileLabelsUnderItsPrefix: on a real S3 server every
// hostile label, made into a key, is stored under the configured prefix,
// whole segments only; raw escaping keys are refused and add nothing.
func TestS3KeepsHostileLabelsUnderItsPrefix(t *testing.T) {
	srv := testenv.StartVersityGW(t)
	o := s3Options(srv)
	s := newS3(t, o)
	ctx := context.Background()
	puts := 0
	for _, p := range hostilePaths() {
		key := ArtifactKey(p)
		if _, err := s.Put(ctx, key, strings.NewReader("{}"), vocab.ObjectMeta{ContentType: "application/json"}); err != nil {
			t.Errorf("Put(%q): %v", key, err)
			continue
		}
		puts++
	}
	for _, k := range escapingKeys {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), vocab.ObjectMeta{}); err == nil {
			t.Errorf("Put(%q) accepted", k)
		}
		if err := s.Delete(ctx, k); err == nil {
			t.Errorf("Delete(%q) accepted", k)
		}
		if _, err := s.LinkFor(ctx, k, time.Minute); err == nil {
			t.Errorf("LinkFor(%q) accepted", k)
		}
	}
	for _, prefix := range []string{"../", "a/../../", "/", `..\`} {
		if err := s.List(ctx, prefix, func(e vocab.ListEntry) error { t.Errorf("List(%q) yielded %q", prefix, e.Key); return nil }); err == nil {
			t.Errorf("List(%q) accepted an escaping prefix", prefix)
		}
	}
	objects := 0
	pager := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range page.Contents {
			full := aws.ToString(obj.Key)
			objects++
			rest, ok := strings.CutPrefix(full, o.Prefix+"/")
			if !ok {
				t.Errorf("object %q outside the prefix %s", full, o.Prefix)
				continue
			}
			if err := ValidKey(rest); err != nil {
				t.Errorf("object %q: %v", full, err)
			}
			if n := len(strings.Split(rest, "/")); n != 8 {
				t.Errorf("object %q has %d segments under the prefix, want 8", full, n)
			}
		}
	}
	if objects != puts || puts != 2*len(hostileLabels) {
		t.Errorf("%d objects in the bucket for %d puts, want %d", objects, puts, 2*len(hostileLabels))
	}
	t.Logf("%d hostile keys stored, all under %s/", objects, o.Prefix)
}

func TestValidPrefix(t *testing.T) {
	for _, ok := range []string{"", "2026/", "2026/12/01/Alert~1a2b3c4d/r1/", "2026/12/0", "a/..b", ".x", ".."} {
		if err := ValidPrefix(ok); err != nil {
			t.Errorf("ValidPrefix(%q): %v", ok, err)
		}
	}
	// ".." alone is a name prefix (of "..x"): harmless, Local walks only the folders a prefix names fully.
	for _, bad := range []string{"/", "../", "a/../", "a//", "./", `a\`, "a\x00", "/abs/"} {
		if ValidPrefix(bad) == nil {
			t.Errorf("ValidPrefix(%q) accepted", bad)
		}
	}
}
