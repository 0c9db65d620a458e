package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Server is a running S3-compatible server started by StartVersityGW or
// StartMinIO, with one empty bucket created for the test.
type S3Server struct {
	// Name is "versitygw" or "minio".
	Name string
	// Endpoint is its base URL, http://127.0.0.1:PORT (path-style addressing).
	Endpoint string
	// Region is the region the server accepts signatures for.
	Region string
	// Bucket is an empty bucket the test may use.
	Bucket string
	// AccessKeyID and SecretAccessKey are the root credentials, fresh random
	// values for each server.
	AccessKeyID, SecretAccessKey string
	// Dir is the folder the server keeps objects in.
	Dir string
	// Proc is the server process.
	Proc *Process

	// command builds the server's command line on its port; ready is the
	// URL that answers 200 once it serves (for Restart).
	command func() *exec.Cmd
	ready   string
}

// Restart stops the server (if it still runs) and starts it again on the
// same port with the same folder and credentials, as after an outage:
// objects and buckets put before are there again.
func (s *S3Server) Restart(t testing.TB) {
	t.Helper()
	s.Proc.Stop()
	s.Proc = StartProcess(t, s.Name, s.command())
	s.Proc.WaitHTTP(t, s.ready, 60*time.Second)
}

// StartVersityGW starts versitygw (built by scripts/install-tools.sh) with its
// posix backend in a temporary folder on a free 127.0.0.1 port, with random
// root credentials, waits for its health endpoint and creates the bucket.
func StartVersityGW(t testing.TB) *S3Server {
	t.Helper()
	bin := Tool(t, "versitygw")
	s := newS3Server(t, "versitygw")
	s.Proc = startServer(t, "versitygw", 30*time.Second, func() (*Process, string) {
		port := FreePort(t)
		s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
		s.command = func() *exec.Cmd {
			cmd := exec.Command(bin, "--port", fmt.Sprintf("127.0.0.1:%d", port), "--region", s.Region,
				"--health", "/health", "posix", s.Dir)
			cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKeyID, "ROOT_SECRET_KEY="+s.SecretAccessKey)
			return cmd
		}
		s.ready = s.Endpoint + "/health"
		return StartProcess(t, "versitygw", s.command()), s.ready
	})
	s.createBucket(t)
	return s
}

// StartMinIO starts a single-drive MinIO server (built by
// scripts/install-tools.sh; AGPL, used only as a test server, never imported)
// in a temporary folder on free 127.0.0.1 ports with random root credentials,
// waits until it is ready and creates the bucket.
func StartMinIO(t testing.TB) *S3Server {
	t.Helper()
	bin := Tool(t, "minio")
	s := newS3Server(t, "minio")
	s.Proc = startServer(t, "minio", 60*time.Second, func() (*Process, string) {
		port, console := FreePort(t), FreePort(t)
		s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
		s.command = func() *exec.Cmd {
			cmd := exec.Command(bin, "server", s.Dir, "--quiet",
				"--address", fmt.Sprintf("127.0.0.1:%d", port),
				"--console-address", fmt.Sprintf("127.0.0.1:%d", console))
			cmd.Env = append(os.Environ(),
				"MINIO_ROOT_USER="+s.AccessKeyID, "MINIO_ROOT_PASSWORD="+s.SecretAccessKey,
				"MINIO_BROWSER=off", "MINIO_REGION="+s.Region, "MINIO_UPDATE=off")
			return cmd
		}
		s.ready = s.Endpoint + "/minio/health/ready"
		return StartProcess(t, "minio", s.command()), s.ready
	})
	s.createBucket(t)
	return s
}

// Client returns an S3 client for the server with its root credentials,
// path-style, with checksums only where required (what third-party stores
// expect).
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:                     s.Region,
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func (s *S3Server) createBucket(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := CreateBucket(ctx, s.Client(), s.Bucket); err != nil {
		t.Fatalf("testenv: %s: create bucket %s: %v", s.Name, s.Bucket, err)
	}
}

// CreateBucket creates bucket through c, again while the server answers 503
// until ctx ends: MinIO's /minio/health/ready answers before its object layer
// is initialized (XMinioServerNotInitialized), and `mc mb` waits it out too.
func CreateBucket(ctx context.Context, c *s3.Client, bucket string) error {
	for {
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		var re *awshttp.ResponseError
		if err == nil || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusServiceUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func newS3Server(t testing.TB, name string) *S3Server {
	return &S3Server{
		Name:            name,
		Region:          "us-east-1",
		Bucket:          "autocapture-test",
		AccessKeyID:     "AK" + randomHex(t, 9),
		SecretAccessKey: randomHex(t, 20),
		Dir:             t.TempDir(),
	}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random: %v", err)
	}
	return hex.EncodeToString(b)
}
