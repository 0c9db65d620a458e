package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Check verifies at startup that the bucket exists and the credentials may
// use it (HeadBucket). Its error is one line naming the bucket and the
// endpoint and saying what to fix, e.g.
//
//	s3 bucket B at http://minio:9000: access denied (check the keys and the bucket policy): …
//
// It never contains a secret.
func (s *S3) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.opts.Bucket)})
	if err == nil {
		return nil
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		// A HEAD answer has no body, so no error code: a 404 may be a missing
		// bucket or (versitygw) an unknown access key. Ask again with a
		// request whose answer names the error.
		_, lerr := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.opts.Bucket), MaxKeys: aws.Int32(1)})
		if lerr != nil && reasonOf(lerr) != nil {
			err = lerr
		} else if isNotFound(err) {
			return fmt.Errorf("%s: %w", s.where(), &classifiedError{vocab.ErrStoreNoBucket, err})
		}
	}
	return fmt.Errorf("%s: %w", s.where(), classify(err))
}

// classifiedError puts a reason before the SDK's error, keeping both for errors.Is.
type classifiedError struct {
	reason, err error
}

func (c *classifiedError) Error() string   { return c.reason.Error() + ": " + c.err.Error() }
func (c *classifiedError) Unwrap() []error { return []error{c.reason, c.err} }

// classify names the reason of an SDK error when it is one a person must fix.
func classify(err error) error {
	if reason := reasonOf(err); reason != nil {
		return &classifiedError{reason, err}
	}
	return err
}

func reasonOf(err error) error {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusForbidden, http.StatusUnauthorized:
			return vocab.ErrStoreAccessDenied
		case http.StatusMovedPermanently:
			return vocab.ErrStoreWrongRegion
		case http.StatusBadRequest:
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorCode() == "AuthorizationHeaderMalformed" {
				return vocab.ErrStoreWrongRegion
			}
			return vocab.ErrStoreBadRequest
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return vocab.ErrStoreNoBucket
		// XAdminUserNotFound: versitygw's answer (a 404) to an unknown access key.
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "XAdminUserNotFound":
			return vocab.ErrStoreAccessDenied
		}
	}
	var se *v4.SigningError // nothing to sign with: not a network problem
	if errors.As(err, &se) && strings.Contains(se.Error(), "retrieve credentials") {
		return vocab.ErrStoreNoCredentials
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // the caller stopped or ran out of time: not the endpoint's fault
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return vocab.ErrStoreUnreachable
	}
	return nil
}

// isNotFound reports a missing key (404, NoSuchKey, NotFound).
func isNotFound(err error) bool {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return true
	}
	var nk *types.NoSuchKey
	var nf *types.NotFound
	return errors.As(err, &nk) || errors.As(err, &nf)
}

// isPreconditionFailed reports a 412 (If-None-Match: * on an existing key).
func isPreconditionFailed(err error) bool {
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusPreconditionFailed
}
