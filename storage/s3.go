package storage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3 stores artifacts in an S3-compatible bucket under Prefix/key. A Put
// streams through the transfer manager's multipart upload, so memory stays
// about PartSize × (Concurrency + 2) whatever the size. What a Put measured
// (sha256 of the stored and of the original bytes, the original size) is
// kept as object tags (see README.md), written right after the upload;
// an object missing them is hashed on Stat and the tags repaired.
type S3 struct {
	opts   S3Options
	client *s3.Client
	tm     *transfermanager.Client
	presig *s3.PresignClient
}

var _ vocab.Store = (*S3)(nil)

// NewS3 returns an S3 store for opts. It makes no request: call Check at
// startup to verify the bucket and the credentials.
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := newS3Client(ctx, o)
	if err != nil {
		return nil, err
	}
	tm := transfermanager.New(client, func(to *transfermanager.Options) {
		to.PartSizeBytes = o.PartSize
		// The first part is read whole before deciding single vs multipart:
		// a threshold of one part keeps that buffer at one part too.
		to.MultipartUploadThreshold = o.PartSize
		to.Concurrency = o.Concurrency
		to.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		// Abort a failed multipart upload even when ctx is what failed.
		to.FailTimeout = 30 * time.Second
	})
	return &S3{opts: o, client: client, tm: tm, presig: s3.NewPresignClient(client)}, nil
}

// Options are the store's options with defaults filled in.
func (s *S3) Options() S3Options { return s.opts }

// full is the object key in the bucket.
func (s *S3) full(key string) string {
	if s.opts.Prefix == "" {
		return key
	}
	return s.opts.Prefix + "/" + key
}

// where names the bucket and endpoint in errors, never a secret.
func (s *S3) where() string {
	ep := s.opts.Endpoint
	if ep == "" {
		ep = "AWS S3"
	}
	return fmt.Sprintf("s3 bucket %s at %s", s.opts.Bucket, ep)
}

// Put streams r into key: sniffed, compressed when text, hashed, uploaded in
// parts with If-None-Match: * so an existing object is never replaced: on the
// store's 412 the new bytes are hashed to the end and compared with what it
// holds (see Store). No HEAD goes first: a key is put again only by a rare
// retry, and every put would pay the round trip. After the upload the hashes
// are written as tags.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	if err := ValidKey(key); err != nil {
		return vocab.Object{}, err
	}
	e, err := newEncoding(ctx, key, r, meta, s.opts.Compression)
	if err != nil {
		return vocab.Object{}, err
	}
	defer e.Close()
	exists, err := s.upload(ctx, key, e.Reader, e.contentType, e.enc, meta.Replace)
	if exists { // another writer won the race
		return s.putExisting(ctx, key, e)
	}
	if err != nil {
		return vocab.Object{}, fmt.Errorf("%s: put %s: %w", s.where(), key, classify(err))
	}
	obj := e.Object()
	if err := s.writeTags(ctx, obj); err != nil {
		return vocab.Object{}, fmt.Errorf("%s: put %s: stored, but recording its sha256 in tags failed: %w", s.where(), key, classify(err))
	}
	return obj, nil
}

// upload sends body to key in parts with the bucket's SSE settings and,
// unless replace, If-None-Match: * so an existing object is never replaced.
// exists reports that the key was already there: the store's 412, or a
// connection reset while sending to a key that exists — a store may answer
// 412 before reading the body and close the connection while the client
// still sends (versitygw does, for a body of a few hundred KB), so the client
// sees a reset, not the 412. When the store is really unreachable the Stat
// fails too and the error stands.
func (s *S3) upload(ctx context.Context, key string, body io.Reader, contentType, encoding string, replace bool) (exists bool, err error) {
	in := &transfermanager.UploadObjectInput{
		Bucket:      aws.String(s.opts.Bucket),
		Key:         aws.String(s.full(key)),
		Body:        body,
		ContentType: aws.String(contentType),
	}
	if !replace { // see replace.go for the one exception
		in.IfNoneMatch = aws.String("*")
	}
	if encoding != "" {
		in.ContentEncoding = aws.String(encoding)
	}
	if s.opts.SSE != "" {
		in.ServerSideEncryption = tmtypes.ServerSideEncryption(s.opts.SSE)
		if s.opts.KMSKeyID != "" {
			in.SSEKMSKeyID = aws.String(s.opts.KMSKeyID)
		}
	}
	_, err = s.tm.UploadObject(ctx, in)
	switch {
	case err == nil:
		return false, nil
	case isPreconditionFailed(err):
		return true, nil
	case !replace && Unavailable(err) && ctx.Err() == nil:
		if _, serr := s.Stat(ctx, key); serr == nil {
			return true, nil
		}
	}
	return false, err
}

// putExisting hashes the rest of the new bytes without uploading them and
// compares them with the stored object.
func (s *S3) putExisting(ctx context.Context, key string, e *encoding) (vocab.Object, error) {
	if _, err := io.Copy(io.Discard, e.Reader); err != nil {
		return vocab.Object{}, fmt.Errorf("%s: put %s: %w", s.where(), key, err)
	}
	stored, err := s.Stat(ctx, key)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("put %s: key exists: %w", key, err)
	}
	return sameContent(key, stored, e.Object())
}

// Open reads an object back as it was put.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.full(key))})
	if err != nil {
		return nil, s.notFoundOr(key, "open", err)
	}
	d, err := decoder(out.Body, aws.ToString(out.ContentEncoding))
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", s.where(), key, err)
	}
	return d, nil
}

// OpenStored reads the stored bytes and their description.
func (s *S3) OpenStored(ctx context.Context, key string) (io.ReadCloser, vocab.Object, error) {
	obj, err := s.Stat(ctx, key)
	if err != nil {
		return nil, vocab.Object{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.full(key))})
	if err != nil {
		return nil, vocab.Object{}, s.notFoundOr(key, "open", err)
	}
	return out.Body, obj, nil
}

// Link returns a presigned GET of the object valid for LinkExpiry, or for
// what is left of the signing credentials when they are temporary (a web
// identity / IRSA session, an assumed role) and end sooner: a presigned URL
// stops working when the credentials that signed it expire, whatever its
// X-Amz-Expires says, so the thread must not promise longer.
func (s *S3) Link(ctx context.Context, key string) (string, time.Duration, error) {
	expiry := s.opts.LinkExpiry
	if p := s.client.Options().Credentials; p != nil {
		if creds, err := p.Retrieve(ctx); err == nil && creds.CanExpire {
			if left := time.Until(creds.Expires).Truncate(time.Second); left < expiry {
				expiry = max(left, time.Second)
			}
		}
	}
	u, err := s.LinkFor(ctx, key, expiry)
	return u, expiry, err
}

// LinkFor returns a presigned GET valid for expiry, which must be between 1 s
// and MaxLinkExpiry. The URL carries the access key id, the signature and,
// with temporary credentials, the session token; never the secret key.
func (s *S3) LinkFor(ctx context.Context, key string, expiry time.Duration) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	if expiry < time.Second || expiry > MaxLinkExpiry {
		return "", fmt.Errorf("%s: link %s: expiry %v is not between 1s and %v", s.where(), key, expiry, MaxLinkExpiry)
	}
	req, err := s.presig.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.full(key))},
		s3.WithPresignExpires(expiry))
	if err != nil {
		return "", fmt.Errorf("%s: link %s: %w", s.where(), key, classify(err))
	}
	return req.URL, nil
}

// Delete removes key; a missing key is not an error.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.full(key))})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("%s: delete %s: %w", s.where(), key, classify(err))
	}
	return nil
}

// List pages through ListObjectsV2 below Prefix/prefix.
func (s *S3) List(ctx context.Context, prefix string, fn func(vocab.ListEntry) error) error {
	if err := ValidPrefix(prefix); err != nil {
		return err
	}
	strip := ""
	if s.opts.Prefix != "" {
		strip = s.opts.Prefix + "/"
	}
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.opts.Bucket),
		Prefix: aws.String(strip + prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("%s: list %q: %w", s.where(), prefix, classify(err))
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), strip)
			if err := fn(vocab.ListEntry{Key: k, Size: aws.ToInt64(o.Size)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *S3) head(ctx context.Context, full string) (*s3.HeadObjectOutput, error) {
	return s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(full)})
}

// notFoundOr makes err ErrNotFound for a missing key, else says where it failed.
func (s *S3) notFoundOr(key, op string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%w: %s in %s", ErrNotFound, key, s.where())
	}
	return fmt.Errorf("%s: %s %s: %w", s.where(), op, key, classify(err))
}

// PutStored uploads bytes already encoded as obj describes (a spooled
// object, see Spool) as they are: obj's content type and encoding, the same
// If-None-Match: * as Put (an existing key is never replaced; the same
// content there is an idempotent success returning the stored Object), and
// obj's hashes as tags, so the object is what a direct Put of the original
// bytes would have stored. The bytes are hashed on the way: when they do not
// match obj.Size and obj.SHA256 the last read fails, the upload is aborted
// and nothing is stored.
func (s *S3) PutStored(ctx context.Context, obj vocab.Object, r io.Reader) (vocab.Object, error) {
	if err := ValidKey(obj.Key); err != nil {
		return vocab.Object{}, err
	}
	obj.Pending = false
	body := &verifyingReader{r: ctxReader{ctx, r}, c: newCounter(), want: obj}
	exists, err := s.upload(ctx, obj.Key, body, obj.ContentType, obj.ContentEncoding, false)
	if exists {
		stored, serr := s.Stat(ctx, obj.Key)
		if serr != nil {
			return vocab.Object{}, fmt.Errorf("put %s: key exists: %w", obj.Key, serr)
		}
		return sameContent(obj.Key, stored, obj)
	}
	if err != nil {
		return vocab.Object{}, fmt.Errorf("%s: put %s: %w", s.where(), obj.Key, classify(err))
	}
	if err := s.writeTags(ctx, obj); err != nil {
		return vocab.Object{}, fmt.Errorf("%s: put %s: stored, but recording its sha256 in tags failed: %w", s.where(), obj.Key, classify(err))
	}
	return obj, nil
}

// verifyingReader hashes what it passes and, instead of io.EOF, returns an
// error when the bytes are not the ones want describes: the upload that
// reads it then fails before it completes.
type verifyingReader struct {
	r    io.Reader
	c    *counter
	want vocab.Object
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.c.Write(p[:n])
	if err == io.EOF && (v.c.n != v.want.Size || v.c.sum() != v.want.SHA256) {
		return n, fmt.Errorf("storage: put %s: the stored bytes are %d bytes sha256 %s, not the %d bytes %s recorded",
			v.want.Key, v.c.n, v.c.sum(), v.want.Size, v.want.SHA256)
	}
	return n, err
}
