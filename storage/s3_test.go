package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// s3Servers starts both S3 servers the backend is proven against.
func s3Servers(t *testing.T) []*testenv.S3Server {
	return []*testenv.S3Server{testenv.StartVersityGW(t), testenv.StartMinIO(t)}
}

var prefixes atomic.Int64

// s3Options points at srv with its root keys and a prefix no other subtest uses.
func s3Options(srv *testenv.S3Server) S3Options {
	return S3Options{
		Bucket: srv.Bucket, Prefix: fmt.Sprintf("t%d/autocapture", prefixes.Add(1)),
		Region: srv.Region, Endpoint: srv.Endpoint, PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
	}
}

func newS3(t *testing.T, o S3Options) *S3 {
	t.Helper()
	s, err := NewS3(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Behaviour(t *testing.T) {
	t.Parallel()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			testStoreBehaviour(t, func(t *testing.T, c Compression) vocab.Store {
				o := s3Options(srv)
				o.Compression = c
				s := newS3(t, o)
				if err := s.Check(context.Background()); err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

func TestS3ObjectsAsOthersSeeThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			o := s3Options(srv)
			s := newS3(t, o)
			text := spanJSON(1 << 20)
			key := "2026/12/01/VLLMHighTTFT/r1/p/traces/slowest.json"
			obj, err := s.Put(ctx, key, bytes.NewReader(text), vocab.ObjectMeta{})
			if err != nil {
				t.Fatal(err)
			}

			t.Run("under the prefix, with Content-Type and Content-Encoding", func(t *testing.T) {
				h, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(o.Prefix + "/" + key)})
				if err != nil {
					t.Fatalf("head %s/%s: %v", o.Prefix, key, err)
				}
				if aws.ToString(h.ContentType) != "application/json" || aws.ToString(h.ContentEncoding) != "gzip" || aws.ToInt64(h.ContentLength) != obj.Size {
					t.Errorf("head: type %q encoding %q length %d; want application/json, gzip, %d",
						aws.ToString(h.ContentType), aws.ToString(h.ContentEncoding), aws.ToInt64(h.ContentLength), obj.Size)
				}
			})

			t.Run("presigned link over plain HTTP", func(t *testing.T) {
				link, valid, err := s.Link(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if valid != time.Hour { // static keys do not expire
					t.Errorf("link valid %v, want the 1 h link_expiry", valid)
				}
				if strings.Contains(link, srv.SecretAccessKey) || !strings.HasPrefix(link, srv.Endpoint+"/") {
					t.Fatalf("link %q holds the secret or points elsewhere", link)
				}
				u, _ := url.Parse(link)
				if exp := u.Query().Get("X-Amz-Expires"); exp != "3600" {
					t.Errorf("X-Amz-Expires = %q, want 3600 (the 1 h default)", exp)
				}
				raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
				resp, err := raw.Get(link)
				stored := bodyAll(t, resp, err)
				if resp.StatusCode != 200 || sum(stored) != obj.SHA256 || resp.Header.Get("Content-Encoding") != "gzip" {
					t.Errorf("GET link: %d, %d bytes sha256 %s encoding %q; want 200 and the stored %s, gzip",
						resp.StatusCode, len(stored), sum(stored), resp.Header.Get("Content-Encoding"), obj.SHA256)
				}
				// A browser-like client decodes it to the original.
				resp, err = http.Get(link)
				if got := bodyAll(t, resp, err); !bytes.Equal(got, text) {
					t.Errorf("GET link with a decoding client: %d bytes, want the %d put", len(got), len(text))
				}
				if _, err := s.LinkFor(ctx, key, MaxLinkExpiry+time.Second); err == nil {
					t.Error("a link beyond MaxLinkExpiry was signed")
				}
				short, _ := s.LinkFor(ctx, key, 1*time.Second)
				time.Sleep(2100 * time.Millisecond)
				resp, err = raw.Get(short)
				bodyAll(t, resp, err)
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("an expired link answered %d, want 403", resp.StatusCode)
				}
			})

			t.Run("tags lost: Stat hashes and repairs", func(t *testing.T) {
				full := o.Prefix + "/" + key
				if _, err := srv.Client().DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: aws.String(srv.Bucket), Key: aws.String(full)}); err != nil {
					t.Fatal(err)
				}
				st, err := s.Stat(ctx, key)
				if err != nil || st != obj {
					t.Fatalf("Stat without tags = %+v, %v; want %+v", st, err, obj)
				}
				tags, err := srv.Client().GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(srv.Bucket), Key: aws.String(full)})
				if err != nil || len(tags.TagSet) != 4 {
					t.Errorf("tags after Stat: %v, %v; want the 4 repaired", tags, err)
				}
			})
		})
	}
}

func bodyAll(t *testing.T, resp *http.Response, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return readAll(t, resp.Body, nil)
}

func TestS3CheckSaysWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			wrongSecret := "wrong-" + srv.SecretAccessKey[6:]
			cases := []struct {
				name   string
				mutate func(*S3Options)
				reason error
				want   string
			}{
				{"wrong secret key", func(o *S3Options) { o.SecretAccessKey = wrongSecret }, vocab.ErrStoreAccessDenied,
					fmt.Sprintf("s3 bucket %s at %s: access denied (check the keys", srv.Bucket, srv.Endpoint)},
				{"unknown access key", func(o *S3Options) { o.AccessKeyID = "AKNOSUCHKEY0000000" }, vocab.ErrStoreAccessDenied,
					fmt.Sprintf("s3 bucket %s at %s: access denied (check the keys", srv.Bucket, srv.Endpoint)},
				{"no such bucket", func(o *S3Options) { o.Bucket = "no-such-bucket" }, vocab.ErrStoreNoBucket,
					fmt.Sprintf("s3 bucket no-such-bucket at %s: no such bucket", srv.Endpoint)},
				{"nothing listening", func(o *S3Options) { o.Endpoint = "http://127.0.0.1:1" }, vocab.ErrStoreUnreachable,
					fmt.Sprintf("s3 bucket %s at http://127.0.0.1:1: endpoint unreachable", srv.Bucket)},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					o := s3Options(srv)
					c.mutate(&o)
					s := newS3(t, o)
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					err := s.Check(cctx)
					if err == nil {
						t.Fatal("Check passed")
					}
					msg := err.Error()
					if !strings.HasPrefix(msg, c.want) || !errors.Is(err, c.reason) {
						t.Errorf("Check = %q\nwant prefix %q and reason %v", msg, c.want, c.reason)
					}
					for _, secret := range []string{srv.SecretAccessKey, wrongSecret} {
						if strings.Contains(msg, secret) || strings.Contains(fmt.Sprintf("%+v %#v", err, o), secret) {
							t.Errorf("a secret key is in %q", msg)
						}
					}
					if strings.Contains(msg, "\n") {
						t.Errorf("error is not one line: %q", msg)
					}
				})
			}
			if err := newS3(t, s3Options(srv)).Check(ctx); err != nil {
				t.Errorf("Check with the right keys: %v", err)
			}
		})
	}
}

// TestS3ServersRefuseAnOverwrite proves what Put's no-overwrite rests on when
// two writers race past the HeadObject: both servers answer 412 to
// If-None-Match: * on an existing key, single-part and multipart alike.
func TestS3ServersRefuseAnOverwrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, srv := range s3Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			o := s3Options(srv)
			o.PartSize = MinPartSize
			s := newS3(t, o)
			for name, size := range map[string]int{"single part": 1 << 10, "multipart": 2*MinPartSize + 1} {
				key := "race/" + strings.ReplaceAll(name, " ", "-")
				body := randomBytes(size)
				if _, err := s.Put(ctx, key, bytes.NewReader(body), vocab.ObjectMeta{}); err != nil {
					t.Fatal(err)
				}
				_, err := s.tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(s.full(key)),
					Body: bytes.NewReader(randomBytes(size + 7)), IfNoneMatch: aws.String("*")})
				if !isPreconditionFailed(err) {
					t.Errorf("%s: overwrite with If-None-Match: * gave %v, want 412", name, err)
				}
				if got := openAll(t, s, key); !bytes.Equal(got, body) {
					t.Errorf("%s: the object changed", name)
				}
			}
		})
	}
}

// TestS3LinkNeverOutlivesItsCredentials: with temporary credentials (here
// from a credential_process in a shared config file, the SDK's default chain
// as with IRSA or an assumed role) ending in 90 s, a presigned link is signed
// for at most that long and says so, though link_expiry is an hour: the URL
// would stop working when the credentials do.
func TestS3LinkNeverOutlivesItsCredentials(t *testing.T) {
	srv := testenv.StartVersityGW(t)
	dir := t.TempDir()
	creds := fmt.Sprintf(`{"Version":1,"AccessKeyId":%q,"SecretAccessKey":%q,"SessionToken":"session","Expiration":%q}`,
		srv.AccessKeyID, srv.SecretAccessKey, time.Now().Add(90*time.Second).UTC().Format(time.RFC3339))
	script := filepath.Join(dir, "creds.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '"+creds+"'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte("[default]\ncredential_process = "+script+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", cfg)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	o := s3Options(srv)
	o.AccessKeyID, o.SecretAccessKey = "", ""
	s := newS3(t, o)
	link, valid, err := s.Link(context.Background(), "a/b.json")
	if err != nil {
		t.Fatal(err)
	}
	if valid > 90*time.Second || valid < 80*time.Second {
		t.Fatalf("link valid %v with credentials ending in 90 s (link_expiry %v)", valid, o.LinkExpiry)
	}
	u, _ := url.Parse(link)
	if exp := u.Query().Get("X-Amz-Expires"); exp != strconv.Itoa(int(valid/time.Second)) {
		t.Errorf("X-Amz-Expires = %s, want %d", exp, int(valid/time.Second))
	}
}
