package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Options configures an S3 store. Only Bucket is required; the zero values
// of the others are the defaults documented on each field.
type S3Options struct {
	// Bucket holds the artifacts; it must exist (Check verifies it).
	Bucket string `yaml:"bucket" json:"bucket"`
	// Prefix is put before every key ("autocapture" → autocapture/2026/…);
	// slashes around it are trimmed. Empty: keys start at the bucket's root.
	Prefix string `yaml:"prefix" json:"prefix"`
	// Region is the bucket's region. Empty: the SDK's (AWS_REGION, the shared
	// config), else us-east-1.
	Region string `yaml:"region" json:"region"`
	// Endpoint is the base URL of an S3-compatible store
	// (http://minio:9000). Empty: AWS S3.
	Endpoint string `yaml:"endpoint" json:"endpoint"`
	// PathStyle addresses the bucket as ENDPOINT/BUCKET/KEY instead of
	// BUCKET.ENDPOINT/KEY (MinIO, versitygw and most self-hosted stores).
	PathStyle bool `yaml:"path_style" json:"path_style"`
	// AccessKeyID and SecretAccessKey are static credentials. Both empty: the
	// SDK's default chain (AWS_* environment, shared config and profiles,
	// web identity / IRSA, ECS and EC2 roles). One without the other is an error.
	AccessKeyID     string `yaml:"access_key_id" json:"access_key_id"`
	SecretAccessKey string `yaml:"secret_access_key" json:"-"`
	// SSE is the server-side encryption asked for on every put: "" (the
	// bucket's default), "AES256" (SSE-S3) or "aws:kms" (SSE-KMS).
	SSE string `yaml:"sse" json:"sse"`
	// KMSKeyID is the KMS key for SSE "aws:kms"; empty means the AWS managed key.
	KMSKeyID string `yaml:"kms_key_id" json:"kms_key_id"`
	// Compression applies to text artifacts (default DefaultCompression).
	Compression Compression `yaml:"compression" json:"compression"`
	// PartSize is the multipart part size, at least 5 MiB (default 8 MiB).
	// A Put holds at most about PartSize × (Concurrency + 2) bytes in memory.
	PartSize int64 `yaml:"part_size" json:"part_size"`
	// Concurrency is how many parts of one Put upload at once (default 4).
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// LinkExpiry is how long a link from Link stays valid: default 1 h,
	// at most MaxLinkExpiry (longer is refused by New).
	LinkExpiry time.Duration `yaml:"link_expiry" json:"link_expiry"`
}

// Defaults of S3Options' zero fields.
const (
	DefaultPartSize    = 8 << 20
	MinPartSize        = 5 << 20
	DefaultConcurrency = 4
	DefaultLinkExpiry  = time.Hour
	// MaxLinkExpiry is SigV4's limit for a presigned URL. A link signed with
	// temporary credentials (IRSA, STS) dies with them, whatever its expiry.
	MaxLinkExpiry = 7 * 24 * time.Hour
)

// String prints the options with the secret access key hidden.
func (o S3Options) String() string {
	secret := ""
	if o.SecretAccessKey != "" {
		secret = "<secret>"
	}
	return fmt.Sprintf("s3{bucket=%s prefix=%s region=%s endpoint=%s path_style=%t access_key_id=%s secret_access_key=%s sse=%s kms_key_id=%s compression=%s}",
		o.Bucket, o.Prefix, o.Region, o.Endpoint, o.PathStyle, o.AccessKeyID, secret, o.SSE, o.KMSKeyID, o.Compression)
}

// GoString is String, so %#v hides the secret too.
func (o S3Options) GoString() string { return o.String() }

// withDefaults validates o and fills its defaults.
func (o S3Options) withDefaults() (S3Options, error) {
	var errs []error
	if o.Bucket == "" {
		errs = append(errs, errors.New("bucket is required"))
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	if o.Prefix != "" {
		if err := ValidKey(o.Prefix); err != nil {
			errs = append(errs, fmt.Errorf("prefix: %w", err))
		}
	}
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		errs = append(errs, errors.New("access_key_id and secret_access_key go together (both empty: the SDK's default chain)"))
	}
	switch o.SSE {
	case "", string(types.ServerSideEncryptionAes256), string(types.ServerSideEncryptionAwsKms):
	default:
		errs = append(errs, fmt.Errorf("sse %q: want \"\", AES256 or aws:kms", o.SSE))
	}
	if o.KMSKeyID != "" && o.SSE != string(types.ServerSideEncryptionAwsKms) {
		errs = append(errs, errors.New("kms_key_id needs sse: aws:kms"))
	}
	c, err := ParseCompression(string(o.Compression))
	if err != nil {
		errs = append(errs, err)
	}
	o.Compression = c
	switch {
	case o.PartSize == 0:
		o.PartSize = DefaultPartSize
	case o.PartSize < MinPartSize:
		errs = append(errs, fmt.Errorf("part_size %d: at least %d (5 MiB)", o.PartSize, MinPartSize))
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	switch {
	case o.LinkExpiry == 0:
		o.LinkExpiry = DefaultLinkExpiry
	case o.LinkExpiry < 0 || o.LinkExpiry > MaxLinkExpiry:
		errs = append(errs, fmt.Errorf("link_expiry %v: between 0 and %v", o.LinkExpiry, MaxLinkExpiry))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("storage: s3 options: %w", err)
	}
	return o, nil
}

// newS3Client builds the SDK client o describes. It makes no request.
func newS3Client(ctx context.Context, o S3Options) (*s3.Client, error) {
	var load []func(*awsconfig.LoadOptions) error
	if o.Region != "" {
		load = append(load, awsconfig.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" {
		load = append(load, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("storage: s3 bucket %s: load the AWS config: %w", o.Bucket, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// Third-party stores mishandle the 2025 default (aws-chunked bodies
		// with trailing checksums): only send checksums an operation requires.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}), nil
}
