package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/storage"
)

func TestStorageDefaultsAreLocalGzip(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("storage:\n  path: /var/lib/autocapture\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Storage
	if s.Backend != BackendLocal || s.Compression != storage.CompressionGzip {
		t.Fatalf("backend %q compression %q, want local gzip", s.Backend, s.Compression)
	}
	o := s.S3.Options(s.Compression)
	if o.PartSize != storage.DefaultPartSize || o.Concurrency != storage.DefaultConcurrency || o.LinkExpiry != storage.DefaultLinkExpiry {
		t.Fatalf("s3 defaults lost: %v part %d concurrency %d expiry %v", o, o.PartSize, o.Concurrency, o.LinkExpiry)
	}
}

// TestS3SectionLoadsIntoOptions: every field reaches the store's options, the
// secret from its _file twin, and never prints.
func TestS3SectionLoadsIntoOptions(t *testing.T) {
	sec := filepath.Join(t.TempDir(), "minio-secret")
	os.WriteFile(sec, []byte("s3-canary-secret\n"), 0o600)
	y := "storage:\n  backend: s3\n  compression: zstd\n  s3:\n    bucket: autocapture\n    prefix: prod\n" +
		"    region: eu-west-1\n    endpoint: http://minio:9000\n    path_style: true\n    access_key_id: AKID\n" +
		"    secret_access_key_file: " + sec + "\n    sse: aws:kms\n    kms_key_id: key-1\n" +
		"    part_size: 16777216\n    concurrency: 2\n    link_expiry: 24h\n"
	cfg, err := Parse("c.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Storage.S3.Options(cfg.Storage.Compression)
	want := storage.S3Options{Bucket: "autocapture", Prefix: "prod", Region: "eu-west-1", Endpoint: "http://minio:9000",
		PathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "s3-canary-secret", SSE: "aws:kms", KMSKeyID: "key-1",
		Compression: storage.CompressionZstd, PartSize: 16 << 20, Concurrency: 2, LinkExpiry: 24 * time.Hour}
	if got != want {
		t.Fatalf("options\n got %#v\nwant %#v (secret %q)", got, want, got.SecretAccessKey)
	}
	j, _ := json.Marshal(cfg)
	if strings.Contains(string(j), "canary") {
		t.Fatalf("the S3 secret printed: %s", j)
	}
}

// TestStorageValidationNamesLines: each semantic error of storage: points at
// the field to fix (file:line:col).
func TestStorageValidationNamesLines(t *testing.T) {
	s3 := "storage:\n  backend: s3\n  s3:\n    bucket: b\n"
	cases := []parseErrCase{
		{"unknown backend", "storage:\n  backend: gcs\n", []string{"c.yaml:2:12: storage.backend: want local or s3, got \"gcs\""}},
		{"unknown compression", "storage:\n  compression: brotli\n", []string{"c.yaml:2:16: storage.compression: want none, gzip or zstd"}},
		{"s3 without bucket", "storage:\n  backend: s3\n", []string{"c.yaml:2:12: storage.backend: is s3 without a bucket"}},
		{"s3 with blank bucket", "storage:\n  backend: s3\n  s3: {bucket: ' '}\n", []string{"c.yaml:2:12: storage.backend: is s3 without a bucket"}},
		{"bucket under local", "storage:\n  s3:\n    bucket: b\n", []string{"c.yaml:3:13: storage.s3.bucket: set, but storage.backend is local"}},
		{"kms key without aws:kms", s3 + "    kms_key_id: k\n", []string{"c.yaml:5:17: storage.s3.kms_key_id: needs sse: aws:kms"}},
		{"kms key with AES256", s3 + "    sse: AES256\n    kms_key_id: k\n", []string{"c.yaml:6:17: storage.s3.kms_key_id: needs sse: aws:kms"}},
		{"unknown sse", s3 + "    sse: aws:kms:dsse\n", []string{"c.yaml:5:10: storage.s3.sse: want"}},
		{"key id without secret", s3 + "    access_key_id: AKID\n", []string{"c.yaml:5:20: storage.s3.access_key_id: set without secret_access_key"}},
		{"secret without key id", s3 + "    secret_access_key: s3cr3t\n", []string{"c.yaml:5:24: storage.s3.secret_access_key: set without access_key_id"}},
		{"link expiry over 7 days", s3 + "    link_expiry: 169h\n", []string{"c.yaml:5:18: storage.s3.link_expiry: 169h0m0s: want more than 0 and at most 168h"}},
		{"link expiry negative", s3 + "    link_expiry: -1s\n", []string{"c.yaml:5:18: storage.s3.link_expiry:"}},
		{"endpoint not a URL", s3 + "    endpoint: minio:9000\n", []string{"c.yaml:5:15: storage.s3.endpoint: want an http(s) URL"}},
		{"endpoint without host", s3 + "    endpoint: 'http://'\n", []string{"c.yaml:5:15: storage.s3.endpoint: want an http(s) URL"}},
		{"part size below 5 MiB", s3 + "    part_size: 1048576\n", []string{"c.yaml:5:16: storage.s3.part_size: 1048576 bytes: at least 5242880"}},
		{"concurrency zero", s3 + "    concurrency: 0\n", []string{"c.yaml:5:18: storage.s3.concurrency: must be at least 1"}},
		{"prefix with dot dot", s3 + "    prefix: a/../b\n", []string{"c.yaml:5:13: storage.s3.prefix:"}},
		{"unknown field", s3 + "    bukket: b\n", []string{"c.yaml:5:5: unknown field \"bukket\""}},
	}
	checkParseErrors(t, cases, nil)
}

// TestS3SecretFileRules: the secret's _file twin follows every secret's rules:
// empty, whitespace or unreadable is a load error at the twin naming the file
// (never its content); both set is refused; the file pairs with the key id.
func TestS3SecretFileRules(t *testing.T) {
	dir := t.TempDir()
	empty, blank, good := writeFile(t, dir, "empty", ""), writeFile(t, dir, "blank", " \n\t\n"), writeFile(t, dir, "good", "s3-canary-secret\n")
	missing := filepath.Join(dir, "missing")
	s3 := "storage:\n  backend: s3\n  s3:\n    bucket: b\n    access_key_id: AKID\n"
	cases := []parseErrCase{
		{"empty file", s3 + "    secret_access_key_file: " + empty + "\n",
			[]string{"c.yaml:6:29: storage.s3.secret_access_key_file:", empty, "empty"}},
		{"whitespace file", s3 + "    secret_access_key_file: " + blank + "\n",
			[]string{"c.yaml:6:29: storage.s3.secret_access_key_file:", blank, "empty"}},
		{"missing file", s3 + "    secret_access_key_file: " + missing + "\n",
			[]string{"c.yaml:6:29: storage.s3.secret_access_key_file:", missing, "no such file"}},
		{"both set", s3 + "    secret_access_key: inline-canary\n    secret_access_key_file: " + good + "\n",
			[]string{"c.yaml:7:29: storage.s3.secret_access_key_file: secret_access_key and secret_access_key_file are both set"}},
		{"whitespace inline", s3 + "    secret_access_key: '  '\n",
			[]string{"c.yaml:6:24: storage.s3.secret_access_key: holds only whitespace"}},
		{"file without key id", "storage:\n  backend: s3\n  s3:\n    bucket: b\n    secret_access_key_file: " + good + "\n",
			[]string{"c.yaml:5:29: storage.s3.secret_access_key_file: set without access_key_id"}},
		// Even with the local backend: a secret file named in the config must be readable.
		{"empty file under local", "storage:\n  s3:\n    secret_access_key_file: " + empty + "\n",
			[]string{"c.yaml:3:29: storage.s3.secret_access_key_file:", empty, "empty"}},
	}
	checkParseErrors(t, cases, func(t *testing.T, err error) {
		if strings.Contains(err.Error(), "canary") {
			t.Errorf("the error shows a secret: %v", err)
		}
		if n := strings.Count(err.Error(), "c.yaml:"); n != 1 {
			t.Errorf("%d errors, want one (an unreadable file is not also empty or unpaired): %v", n, err)
		}
	})
	ok := s3 + "    secret_access_key_file: " + good + "\n"
	cfg, err := Parse("c.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.S3.SecretAccessKey.Reveal() != "s3-canary-secret" {
		t.Fatalf("secret = %q, want the file's content trimmed", cfg.Storage.S3.SecretAccessKey.Reveal())
	}
}

// TestDocumentedStorageExamplesParse: every YAML example of a storage: section
// in README.md and storage/README.md loads (docs that drift fail here).
func TestDocumentedStorageExamplesParse(t *testing.T) {
	for _, doc := range []string{"../README.md", "../storage/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
			y, _, _ := strings.Cut(block, "```")
			if !strings.HasPrefix(y, "storage:\n") {
				continue
			}
			n++
			y = strings.ReplaceAll(y, "…", "x") // elided ARNs
			y = strings.ReplaceAll(y, "secret_access_key_file: /etc/autocapture/minio-secret", "secret_access_key: s")
			cfg, err := Parse(doc, []byte(y))
			if err != nil {
				t.Errorf("%s example:\n%s\n%v", doc, y, err)
				continue
			}
			if cfg.Storage.Backend != BackendS3 {
				t.Errorf("%s example leaves backend %q:\n%s", doc, cfg.Storage.Backend, y)
			}
		}
		if n < 2 {
			t.Errorf("%s: %d storage examples, want the MinIO and the AWS one", doc, n)
		}
	}
}
