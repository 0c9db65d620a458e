package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autocapture/autocapture/vocab"
)

func TestKeySanitizesUntrustedSegments(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "vllm-0:8000", "vllm-0_8000"},
		{"dotdot", "../../etc/passwd", "_.._etc_passwd"},
		{"absolute", "/etc/passwd", "_etc_passwd"},
		{"control", "a\x00b\nc", "a_b_c"},
		{"empty", "", "_"},
		{"only dots", "..", "_"},
		{"unicode", "模型", "__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Segment(c.in)
			if got != c.want {
				t.Fatalf("Segment(%q) = %q, want %q", c.in, got, c.want)
			}
			if err := ValidKey(Key("runs", c.in, "x.json")); err != nil {
				t.Fatalf("Key with %q is invalid: %v", c.in, err)
			}
		})
	}
	if len(Segment(strings.Repeat("a", 1000))) > maxSegment {
		t.Fatal("long segment not truncated")
	}
}

func TestValidKeyRejectsEscapes(t *testing.T) {
	for _, k := range []string{"", "/abs", "a/../b", "a//b", "./a", "a\\b", "a\x01b", "a/."} {
		if ValidKey(k) == nil {
			t.Errorf("ValidKey(%q) accepted", k)
		}
	}
}

func TestLocalPutStreamsAndHashes(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := strings.Repeat("evidence ", 100000)
	obj, err := s.Put(ctx, "runs/r1/metrics.json", strings.NewReader(body), vocab.ObjectMeta{ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	if obj.OriginalSize != int64(len(body)) || obj.ContentSHA256() != hex.EncodeToString(sum[:]) || obj.ContentEncoding != "gzip" {
		t.Fatalf("object = %+v", obj)
	}
	onDisk, _ := os.ReadFile(filepath.Join(dir, "runs/r1/metrics.json"))
	if disk := sha256.Sum256(onDisk); int64(len(onDisk)) != obj.Size || hex.EncodeToString(disk[:]) != obj.SHA256 {
		t.Fatalf("file on disk (%d bytes) is not the object %+v", len(onDisk), obj)
	}
	rc, err := s.Open(ctx, "runs/r1/metrics.json")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != body {
		t.Fatal("read back differs")
	}
	link, valid, _ := s.Link(ctx, "runs/r1/metrics.json")
	if valid != 0 {
		t.Errorf("a file link is valid %v, want 0 (as long as the object is kept)", valid)
	}
	if !strings.HasPrefix(link, "file://") || !strings.HasSuffix(link, "/runs/r1/metrics.json") {
		t.Fatalf("link = %q", link)
	}
	if _, err := s.Open(ctx, "runs/none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := s.Put(ctx, "../escape", strings.NewReader("x"), vocab.ObjectMeta{}); err == nil {
		t.Fatal("put outside the root accepted")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("file written outside the root")
	}
}

func TestLocalPutLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewLocal(dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, "a/b.bin", strings.NewReader("data"), vocab.ObjectMeta{}); err == nil {
		t.Fatal("put with a cancelled context succeeded")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "a"))
	if len(entries) != 0 {
		t.Fatalf("left files behind: %v", entries)
	}
}

func TestLocalBehaviour(t *testing.T) {
	t.Parallel()
	testStoreBehaviour(t, func(t *testing.T, c Compression) vocab.Store {
		s, err := NewLocal(t.TempDir(), WithLocalCompression(c))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestLocalSidecars(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewLocal(dir)
	ctx := context.Background()
	body := strings.Repeat("line of text\n", 5000)
	obj, err := s.Put(ctx, "a/b.txt", strings.NewReader(body), vocab.ObjectMeta{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	s.List(ctx, "", func(e vocab.ListEntry) error { keys = append(keys, e.Key); return nil })
	if len(keys) != 1 || keys[0] != "a/b.txt" {
		t.Errorf("List = %q, want only a/b.txt (no sidecar, no temporary file)", keys)
	}
	if _, err := s.Put(ctx, ".meta/a/b.txt.json", strings.NewReader("{}"), vocab.ObjectMeta{}); err == nil {
		t.Error("a key in the sidecar tree was accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, ".meta", "a", "b.txt.json")); err != nil {
		t.Errorf("sidecar missing: %v", err)
	}

	// A file without a sidecar (copied in by hand) is described by hashing it.
	plain := []byte("dropped in by hand")
	os.WriteFile(filepath.Join(dir, "a", "hand.txt"), plain, 0o644)
	st, err := s.Stat(ctx, "a/hand.txt")
	if sum := sha256.Sum256(plain); err != nil || st.SHA256 != hex.EncodeToString(sum[:]) || st.ContentEncoding != "" {
		t.Errorf("Stat of a file without sidecar = %+v, %v", st, err)
	}

	if err := s.Delete(ctx, "a/b.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".meta", "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete left the sidecar folder: %v", err)
	}
	_ = obj
}
