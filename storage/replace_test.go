package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// testReplace is what Meta.Replace must do on every backend: overwrite, with
// Stat, Open and List agreeing on the new bytes (same size as the old, so a
// size check alone could not tell them apart), while a Put without Replace
// of that key still conflicts.
func testReplace(t *testing.T, s vocab.Store) {
	ctx := context.Background()
	key := "2026/12/01/VLLMSlowTTFT/r1/manifest.json"
	v1 := []byte(`{"run":"r1","steps":[{"id":"scrape","status":"failed"}]}` + "\n")
	v2 := []byte(`{"run":"r1","steps":[{"id":"scrape","status":"partial"}]}` + "\n")
	v2 = v2[:len(v1)] // same length, different bytes
	v2[len(v2)-1] = '\n'
	if _, err := s.Put(ctx, key, bytes.NewReader(v1), vocab.ObjectMeta{Replace: true}); err != nil {
		t.Fatalf("first replace (no object yet): %v", err)
	}
	obj, err := s.Put(ctx, key, bytes.NewReader(v2), vocab.ObjectMeta{Replace: true})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if obj.ContentSHA256() != sum(v2) {
		t.Errorf("replace returned content sha256 %s, want the new %s", obj.ContentSHA256(), sum(v2))
	}
	st, err := s.Stat(ctx, key)
	if err != nil || st.ContentSHA256() != sum(v2) || st.Size != obj.Size {
		t.Errorf("Stat after replace = %+v, %v; want the new bytes' %s", st, err, sum(v2))
	}
	if got := openAll(t, s, key); !bytes.Equal(got, v2) {
		t.Errorf("Open after replace = %q, want %q", got, v2)
	}
	if st.ContentType != "application/json" {
		t.Errorf("content type %q, want application/json", st.ContentType)
	}
	if _, err := s.Put(ctx, key, bytes.NewReader(v1), vocab.ObjectMeta{}); !errors.Is(err, ErrConflict) {
		t.Errorf("a Put without Replace over the replaced key gave %v, want ErrConflict", err)
	}
	var n int
	s.List(ctx, "2026/12/01/VLLMSlowTTFT/r1/", func(vocab.ListEntry) error { n++; return nil })
	if n != 1 {
		t.Errorf("List under the run shows %d objects, want 1 (no temporary file)", n)
	}
}

func TestLocalReplace(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewLocal(dir)
	testReplace(t, s)

	// A kill -9 between removing the old sidecar and writing the new one
	// leaves the bytes without one: Stat and Open must describe them truly,
	// which is why replaced objects are stored uncompressed.
	ctx := context.Background()
	key := "x/manifest.json"
	body := bytes.Repeat([]byte(`{"a":1}`), 1000) // compressible text
	if _, err := s.Put(ctx, key, bytes.NewReader(body), vocab.ObjectMeta{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ".meta", "x", "manifest.json.json")); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stat(ctx, key)
	if err != nil || st.ContentSHA256() != sum(body) {
		t.Errorf("Stat without sidecar = %+v, %v; want the bytes' %s", st, err, sum(body))
	}
	if got := openAll(t, s, key); !bytes.Equal(got, body) {
		t.Errorf("Open without sidecar gave %d bytes, want the %d put", len(got), len(body))
	}
}

func TestS3Replace(t *testing.T) {
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			testReplace(t, newS3(t, s3Options(srv)))
		})
	}
}

// TestS3ReplaceDropsStaleTags proves the crash window of an S3 replace: an
// overwrite whose tagging never happened (the process died after the PUT)
// must not be described by the old object's tags. Both servers drop the tags
// with the new object, so Stat hashes the new bytes.
func TestS3ReplaceDropsStaleTags(t *testing.T) {
	ctx := context.Background()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			o := s3Options(srv)
			o.Compression = CompressionNone
			s := newS3(t, o)
			key := "r/manifest.json"
			old, fresh := []byte(`{"v":1}`), []byte(`{"v":2}`)
			if _, err := s.Put(ctx, key, bytes.NewReader(old), vocab.ObjectMeta{Replace: true}); err != nil {
				t.Fatal(err)
			}
			// The replace's PUT, without the tagging that follows it.
			if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket),
				Key: aws.String(s.full(key)), Body: bytes.NewReader(fresh), ContentType: aws.String("application/json")}); err != nil {
				t.Fatal(err)
			}
			st, err := s.Stat(ctx, key)
			if err != nil || st.SHA256 != sum(fresh) {
				t.Fatalf("Stat after an untagged overwrite = %+v, %v; want the new bytes' %s (old %s)", st, err, sum(fresh), sum(old))
			}
		})
	}
}
