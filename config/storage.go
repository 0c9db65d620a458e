package config

import (
	"strings"
	"time"

	"github.com/autocapture/autocapture/storage"
)

// Storage is where the embedded database and the artifacts live.
type Storage struct {
	// Path holds autocapture.db (SQLite) and, with the local backend, artifacts/.
	Path string `yaml:"path" json:"path"`
	// Backend is where artifacts go: BackendLocal (under Path) or BackendS3.
	Backend string `yaml:"backend" json:"backend"`
	// Compression is how text artifacts are compressed on the way in, for
	// either backend: none, gzip (the default) or zstd.
	Compression storage.Compression `yaml:"compression" json:"compression"`
	// Links is how threads link artifacts: LinksRoute (the default) or
	// LinksPresigned.
	Links string `yaml:"links" json:"links"`
	// S3 is the bucket of the s3 backend; it is checked only when Backend is s3.
	S3 S3 `yaml:"s3" json:"s3"`
}

// The storage backends.
const (
	BackendLocal = "local"
	BackendS3    = "s3"
)

// S3 is an S3 or S3-compatible bucket (AWS, MinIO, versitygw, Ceph RGW).
// storage/README.md explains each field and the IAM policy the daemon needs.
type S3 struct {
	// Bucket must exist; the daemon checks it at startup and every minute.
	Bucket string `yaml:"bucket" json:"bucket"`
	// Prefix is put before every key (prefix/2026/…).
	Prefix string `yaml:"prefix" json:"prefix"`
	// Region is the bucket's; empty: the SDK's (AWS_REGION, profile), else us-east-1.
	Region string `yaml:"region" json:"region"`
	// Endpoint is the base URL of an S3-compatible store; empty: AWS.
	Endpoint string `yaml:"endpoint" json:"endpoint"`
	// PathStyle addresses ENDPOINT/BUCKET/KEY (MinIO, versitygw).
	PathStyle bool `yaml:"path_style" json:"path_style"`
	// AccessKeyID and SecretAccessKey are static keys, both or neither;
	// neither: the SDK's default chain (AWS_* variables, profile, IRSA, roles).
	AccessKeyID     string `yaml:"access_key_id" json:"access_key_id"`
	SecretAccessKey Secret `yaml:"secret_access_key" json:"secret_access_key"`
	// SecretAccessKeyFile is the _file twin of SecretAccessKey.
	SecretAccessKeyFile string `yaml:"secret_access_key_file" json:"secret_access_key_file"`
	// SSE is "" (the bucket's default), AES256 or aws:kms.
	SSE string `yaml:"sse" json:"sse"`
	// KMSKeyID is the key for sse: aws:kms (empty: the AWS managed key).
	KMSKeyID string `yaml:"kms_key_id" json:"kms_key_id"`
	// PartSize is the multipart part size in bytes, at least 5 MiB.
	PartSize int64 `yaml:"part_size" json:"part_size"`
	// Concurrency is how many parts of one upload are in flight.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// LinkExpiry is a presigned link's lifetime, at most 7 days (SigV4's limit).
	LinkExpiry time.Duration `yaml:"link_expiry" json:"link_expiry"`
}

// Options converts the section to the store's options, revealing the secret
// for the one place that sends it.
func (s S3) Options(c storage.Compression) storage.S3Options {
	return storage.S3Options{Bucket: s.Bucket, Prefix: s.Prefix, Region: s.Region, Endpoint: s.Endpoint,
		PathStyle: s.PathStyle, AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey.Reveal(),
		SSE: s.SSE, KMSKeyID: s.KMSKeyID, Compression: c, PartSize: s.PartSize,
		Concurrency: s.Concurrency, LinkExpiry: s.LinkExpiry}
}

// checkStorage validates storage:. The s3 section is checked only with the s3
// backend, but a bucket under the local backend is refused: artifacts would
// silently stay on this machine.
func (v *validator) checkStorage(c Storage) {
	const p = "$.storage"
	if c.Path == "" {
		v.errorf(p+".path", "must not be empty")
	}
	if _, err := storage.ParseCompression(string(c.Compression)); err != nil || c.Compression == "" {
		v.errorf(p+".compression", "want none, gzip or zstd, got %q", c.Compression)
	}
	switch c.Backend {
	case BackendS3:
		v.checkS3(c.S3)
	case BackendLocal:
		if c.S3.Bucket != "" {
			v.errorf(p+".s3.bucket", "set, but storage.backend is local: set backend: s3 to store artifacts in the bucket, or remove the s3 section")
		}
	default:
		v.errorf(p+".backend", "want local or s3, got %q", c.Backend)
	}
}

func (v *validator) checkS3(s S3) {
	const p = "$.storage.s3"
	if strings.TrimSpace(s.Bucket) == "" {
		v.errorf("$.storage.backend", "is s3 without a bucket: set storage.s3.bucket")
	}
	if pre := strings.Trim(s.Prefix, "/"); pre != "" {
		if err := storage.ValidKey(pre); err != nil {
			v.errorf(p+".prefix", "%v", err)
		}
	}
	if s.Endpoint != "" {
		v.checkURL(p+".endpoint", s.Endpoint)
	}
	// A secret set but blank or unreadable is reported by checkSecrets, once.
	hasSecret := s.SecretAccessKey != "" || s.SecretAccessKeyFile != ""
	switch {
	case s.AccessKeyID != "" && !hasSecret:
		v.errorf(p+".access_key_id", "set without secret_access_key (or secret_access_key_file): static keys go in pairs; set neither for the SDK's default chain")
	case s.AccessKeyID == "" && hasSecret:
		path := p + ".secret_access_key"
		if s.SecretAccessKeyFile != "" {
			path += "_file"
		}
		v.errorf(path, "set without access_key_id: static keys go in pairs; set neither for the SDK's default chain")
	}
	switch s.SSE {
	case "", "AES256", "aws:kms":
	default:
		v.errorf(p+".sse", "want \"\" (the bucket's default), AES256 or aws:kms, got %q", s.SSE)
	}
	if s.KMSKeyID != "" && s.SSE != "aws:kms" {
		v.errorf(p+".kms_key_id", "needs sse: aws:kms (got sse %q)", s.SSE)
	}
	if s.PartSize < storage.MinPartSize {
		v.errorf(p+".part_size", "%d bytes: at least %d (5 MiB, S3's minimum part)", s.PartSize, storage.MinPartSize)
	}
	if s.Concurrency < 1 {
		v.errorf(p+".concurrency", "must be at least 1")
	}
	if s.LinkExpiry <= 0 || s.LinkExpiry > storage.MaxLinkExpiry {
		v.errorf(p+".link_expiry", "%v: want more than 0 and at most 168h (7 days, SigV4's limit for a presigned link)", s.LinkExpiry)
	}
}
