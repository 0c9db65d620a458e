package config

import (
	"strings"
	"time"

	"github.com/autocapture/autocapture/storage"
)

// Storage is where the embedded database and the artifacts live.
//
// Artifacts go to a local folder (backend: local, the default:
// storage.path/artifacts) or to an S3 or S3-compatible bucket (backend: s3);
// text artifacts are compressed on the way in for either. A key is written
// once, so a resumed step never overwrites what a run recorded. Each finished
// run also gets a manifest.json in its folder
// (yyyy/mm/dd/<alertname>/<run>/manifest.json: the alert, the playbooks with
// digests, every step with its rendered config, outcome, findings and
// artifacts with sizes and sha256, the verdict and its history, the versions
// of autocapture and of vLLM when a step read it); the run API shows its key
// as manifest. It is the only object ever rewritten, when a late upload
// lands.
type Storage struct {
	// Path holds autocapture.db (the embedded SQLite run store), with the
	// local backend artifacts/, and with s3 the upload spool (spool/);
	// --storage.path overrides it.
	Path string `yaml:"path" json:"path"`
	// Backend is where artifacts go: local (under path/artifacts) or s3 (the
	// bucket of storage.s3: AWS S3, MinIO, versitygw, Ceph RGW, …).
	Backend string `yaml:"backend" json:"backend"`
	// Compression is how text artifacts (JSON, text, YAML, …) are
	// compressed on the way in, for either backend: none, gzip (every
	// browser decodes it) or zstd (~10 % smaller). Already-compressed and
	// binary files are stored as they are.
	Compression storage.Compression `yaml:"compression" json:"compression"`
	// Links is how a thread links an artifact: route (a signed link to this
	// daemon's /artifacts route under web.external_url, valid web.link_ttl)
	// or presigned (the store's own link, valid storage.s3.link_expiry at
	// most, its lifetime said in the link's text).
	Links string `yaml:"links" json:"links"`
	// S3 is the bucket of the s3 backend; it is read only with backend: s3
	// (a bucket with backend: local is an error).
	S3 S3 `yaml:"s3" json:"s3"`
}

// The storage backends.
const (
	BackendLocal = "local"
	BackendS3    = "s3"
)

// S3 is an S3 or S3-compatible bucket (AWS, MinIO, versitygw, Ceph RGW).
// storage/README.md explains each field and the IAM policy the daemon needs.
//
// The bucket is checked at startup and every minute: a failing check (wrong
// keys, missing bucket, endpoint down) is one error line naming bucket and
// endpoint, never a secret, and sets autocapture_storage_up{backend="s3"} to
// 0, but the daemon keeps running and /-/ready does not depend on the bucket.
// While the bucket is unavailable (refused, reset, timeout, DNS, 5xx,
// SlowDown) artifacts are kept in storage.path/spool (fsynced) and the step
// records them pending; they are uploaded, same key and sha256, when it
// answers (see runs.replica). Wrong credentials are not an outage: the put
// fails naming bucket and endpoint.
type S3 struct {
	// Bucket must exist; objects go to
	// s3://bucket/prefix/yyyy/mm/dd/alertname/run/… The daemon checks it at
	// startup and every minute.
	Bucket string `yaml:"bucket" json:"bucket"`
	// Prefix is put before every key (prefix/2026/…).
	Prefix string `yaml:"prefix" json:"prefix"`
	// Region is the bucket's region; empty: the SDK's (AWS_REGION, profile), else us-east-1.
	Region string `yaml:"region" json:"region"`
	// Endpoint is the base URL of an S3-compatible store, e.g.
	// http://minio.observability:9000; empty: AWS S3.
	Endpoint string `yaml:"endpoint" json:"endpoint"`
	// PathStyle addresses ENDPOINT/BUCKET/KEY (MinIO, versitygw, most
	// self-hosted stores).
	PathStyle bool `yaml:"path_style" json:"path_style"`
	// AccessKeyID and SecretAccessKey are static keys, both or neither;
	// neither: the SDK's default chain (AWS_* variables, shared config and
	// profiles, IRSA web identity, ECS/EC2 roles).
	AccessKeyID string `yaml:"access_key_id" json:"access_key_id"`
	// SecretAccessKey is the static key's secret, with AccessKeyID.
	SecretAccessKey Secret `yaml:"secret_access_key" json:"secret_access_key"`
	// SecretAccessKeyFile is the _file twin of SecretAccessKey.
	SecretAccessKeyFile string `yaml:"secret_access_key_file" json:"secret_access_key_file"`
	// SSE is the server-side encryption asked for on every put: "" (the
	// bucket's default), AES256 (SSE-S3) or aws:kms (SSE-KMS, with
	// kms_key_id).
	SSE string `yaml:"sse" json:"sse"`
	// KMSKeyID is the key for sse: aws:kms (empty: the AWS managed key).
	KMSKeyID string `yaml:"kms_key_id" json:"kms_key_id"`
	// PartSize is the multipart part size in bytes, at least 5 MiB.
	PartSize int64 `yaml:"part_size" json:"part_size"`
	// Concurrency is how many parts of one upload are in flight: an upload
	// holds about part_size x (concurrency + 2) bytes in memory.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// LinkExpiry is a presigned link's lifetime, at most 7 days (SigV4's
	// limit), and never longer than what is left of temporary signing
	// credentials (an IRSA or assumed-role session), which the URL cannot
	// outlive.
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
