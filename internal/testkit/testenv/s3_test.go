package testenv

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestS3Servers(t *testing.T) {
	t.Parallel()
	for _, start := range []func(testing.TB) *S3Server{StartVersityGW, StartMinIO} {
		srv := func() *S3Server {
			t.Helper()
			begin := time.Now()
			s := start(t)
			t.Logf("%s ready in %v", s.Name, time.Since(begin))
			return s
		}()
		t.Run(srv.Name, func(t *testing.T) {
			ctx := context.Background()
			c := srv.Client()
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("a/b.txt"),
				Body: strings.NewReader("hello")}); err != nil {
				t.Fatalf("put: %v", err)
			}
			out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("a/b.txt")})
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			b, _ := io.ReadAll(out.Body)
			out.Body.Close()
			if string(b) != "hello" {
				t.Errorf("got %q, want hello", b)
			}
			if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") || srv.SecretAccessKey == "" {
				t.Errorf("server %+v not on loopback or without credentials", srv)
			}
		})
	}
}
