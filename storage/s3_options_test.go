package storage

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vocab"
)

func TestS3OptionsValidate(t *testing.T) {
	ok := S3Options{Bucket: "b"}
	cases := []struct {
		name   string
		mutate func(*S3Options)
		want   string // "" = valid
	}{
		{"defaults", func(*S3Options) {}, ""},
		{"no bucket", func(o *S3Options) { o.Bucket = "" }, "bucket is required"},
		{"key without secret", func(o *S3Options) { o.AccessKeyID = "AK" }, "go together"},
		{"secret without key", func(o *S3Options) { o.SecretAccessKey = "s" }, "go together"},
		{"bad sse", func(o *S3Options) { o.SSE = "aes" }, `sse "aes"`},
		{"kms key without kms", func(o *S3Options) { o.SSE = "AES256"; o.KMSKeyID = "k" }, "kms_key_id needs sse: aws:kms"},
		{"kms", func(o *S3Options) { o.SSE = "aws:kms"; o.KMSKeyID = "k" }, ""},
		{"small parts", func(o *S3Options) { o.PartSize = 1 << 20 }, "part_size"},
		{"link too long", func(o *S3Options) { o.LinkExpiry = 8 * 24 * time.Hour }, "link_expiry"},
		{"bad compression", func(o *S3Options) { o.Compression = "lz4" }, "compression"},
		{"bad prefix", func(o *S3Options) { o.Prefix = "a/../b" }, "prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ok
			c.mutate(&o)
			got, err := o.withDefaults()
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.PartSize != DefaultPartSize || got.Concurrency != DefaultConcurrency || got.LinkExpiry != time.Hour || got.Compression != CompressionGzip {
					t.Errorf("defaults not filled: %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	o := S3Options{Bucket: "b", AccessKeyID: "AKID", SecretAccessKey: "very-secret-value"}
	for _, s := range []string{o.String(), fmt.Sprintf("%v %+v %#v %s", o, o, o, o)} {
		if strings.Contains(s, "very-secret-value") || !strings.Contains(s, "<secret>") {
			t.Errorf("options print as %q", s)
		}
	}
}

// TestS3PutRequest checks the headers a Put sends, on a fake endpoint.
func TestS3PutRequest(t *testing.T) {
	var mu sync.Mutex
	got := map[string]http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Method+" "+r.URL.RawQuery] = r.Header.Clone()
		mu.Unlock()
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", `"abc"`)
	}))
	defer srv.Close()
	s, err := NewS3(context.Background(), S3Options{Bucket: "b", Endpoint: srv.URL, PathStyle: true, Region: "eu-west-1",
		AccessKeyID: "AKID", SecretAccessKey: "very-secret-value", SSE: "aws:kms", KMSKeyID: "arn:aws:kms:eu-west-1:1:key/k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "k/x.json", strings.NewReader(`{"a":1}`), vocab.ObjectMeta{}); err != nil {
		t.Fatal(err)
	}
	put := got["PUT x-id=PutObject"]
	if put == nil {
		t.Fatalf("no PutObject among %v", got)
	}
	for h, want := range map[string]string{
		"If-None-Match": "*", "Content-Encoding": "gzip", "Content-Type": "application/json",
		"X-Amz-Server-Side-Encryption": "aws:kms", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "arn:aws:kms:eu-west-1:1:key/k",
	} {
		if put.Get(h) != want {
			t.Errorf("PutObject %s = %q, want %q", h, put.Get(h), want)
		}
	}
	if got["PUT tagging="] == nil {
		t.Errorf("no PutObjectTagging after the upload: %v", got)
	}
	for req, h := range got {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, "very-secret-value") {
					t.Errorf("%s header %s carries the secret", req, k)
				}
			}
		}
	}
}
