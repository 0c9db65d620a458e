package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/autocapture/autocapture/vocab"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// StoredPutter is a store that can take bytes already encoded (a spooled
// object) as they are: *S3, and the Instrumented wrapper around it.
type StoredPutter interface {
	vocab.Store
	// PutStored uploads r, the stored bytes obj describes, under obj.Key, as
	// they are (see (*S3).PutStored).
	PutStored(ctx context.Context, obj vocab.Object, r io.Reader) (vocab.Object, error)
}

// Spool keeps artifacts on local disk while the primary store (an S3 bucket)
// is unavailable, so that no evidence is lost to an outage.
//
// Put writes the bytes to the spool first (a Local store under the spool
// folder, compressed exactly as the primary would, fsynced), then uploads the
// spool file as it is (PutStored) and deletes it. Why spool first rather
// than tee the upload: the reader is read exactly once, whatever point the
// primary fails at (a half-consumed reader cannot be replayed, and a tee
// would have to keep writing the rest after the upload died mid-part); the
// upload then reads a local file of known size and sha256, which is also what
// a late upload reads, so both paths move the same stored bytes and memory
// stays bounded by the upload's part buffers (the spool write streams).
//
// When the upload fails because the primary is unavailable (see Unavailable)
// the file stays, Put returns its Object with Pending set and calls the
// OnSpool hook (the runner records a row and an upload job); the Object's
// key, size and hashes are those a direct upload would have recorded.
// Any other failure (a conflict, access denied, a cancelled context) is the
// Put's error and the file is removed again: those are not outages, and
// spooling them would hide a configuration error until the disk filled.
//
// For a while after an unavailable failure (DownFor), Put spools without
// trying the primary first, so steps do not each wait out the SDK's retries
// against a store that is down; a successful upload ends that at once.
// Reads fall back to the spool; Link, Delete and List go to the primary.
type Spool struct {
	primary StoredPutter
	local   *Local
	// DownFor is how long Put skips the primary after it was unavailable
	// (default 10 s; negative: always try).
	DownFor time.Duration

	mu        sync.Mutex
	downUntil time.Time
	inFlight  map[string]int // keys a Put is writing or uploading now
	onSpool   func(ctx context.Context, obj vocab.Object)
	now       func() time.Time
}

var (
	_ vocab.Store  = (*Spool)(nil)
	_ StoredPutter = (*S3)(nil)
)

// NewSpool spools for primary under dir (created), compressing text with c,
// which must be the primary's compression, so the spooled bytes are those
// the primary would have stored.
func NewSpool(primary StoredPutter, dir string, c Compression) (*Spool, error) {
	l, err := NewLocal(dir, WithLocalCompression(c))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return &Spool{primary: primary, local: l, DownFor: 10 * time.Second, inFlight: map[string]int{}, now: time.Now}, nil
}

// Dir is the spool folder.
func (s *Spool) Dir() string { return s.local.Root() }

// Primary is the store the spool uploads to.
func (s *Spool) Primary() StoredPutter { return s.primary }

// OnSpool sets the hook Put calls after it kept an object in the spool (the
// file is durable by then). It may be called concurrently.
func (s *Spool) OnSpool(fn func(ctx context.Context, obj vocab.Object)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onSpool = fn
}

// Put stores r under key: in the primary when it answers, else in the spool
// with Object.Pending set (see Spool).
func (s *Spool) Put(ctx context.Context, key string, r io.Reader, meta vocab.ObjectMeta) (vocab.Object, error) {
	if err := ValidKey(key); err != nil {
		return vocab.Object{}, err
	}
	if meta.Replace {
		// A rewritable object (the run's manifest) is derived data its writer
		// retries: spooling it would upload it later with never-overwrite, which
		// an earlier version of it refuses. It goes to the primary or fails.
		return s.primary.Put(ctx, key, r, meta)
	}
	s.begin(key)
	defer s.end(key)
	_, statErr := s.local.Stat(ctx, key)
	existed := statErr == nil // spooled already (a re-put of a pending key): never removed here
	obj, err := s.local.Put(ctx, key, r, meta)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("spool %s: %w", s.local.Root(), err)
	}
	var upErr error
	if s.skipPrimary() {
		upErr = errSkipped
	} else {
		up, err := s.upload(ctx, obj)
		if err == nil {
			return up, nil
		}
		upErr = err
	}
	if ctx.Err() != nil || !Unavailable(upErr) {
		if !existed {
			_ = s.local.Delete(context.WithoutCancel(ctx), key)
		}
		return vocab.Object{}, upErr
	}
	s.markDown()
	obj.Pending = true
	s.mu.Lock()
	hook := s.onSpool
	s.mu.Unlock()
	if hook != nil {
		hook(ctx, obj)
	}
	return obj, nil
}

// errSkipped stands for the upload Put did not try because the primary was
// unavailable moments ago.
var errSkipped = fmt.Errorf("%w: it failed moments ago; spooled without trying", vocab.ErrStoreUnreachable)

// Upload moves the spooled key to the primary: the stored bytes and their
// description as they are, then deletes the spool file. Uploading a key the
// primary already holds with the same content is an idempotent success (a
// crash after an upload, before the spool file was deleted). A key that is
// no longer spooled is success when the primary holds it (another Put or
// upload got there first), else ErrNotFound.
func (s *Spool) Upload(ctx context.Context, key string) (vocab.Object, error) {
	obj, err := s.local.Stat(ctx, key)
	if errors.Is(err, ErrNotFound) {
		stored, serr := s.primary.Stat(ctx, key)
		if serr != nil {
			return vocab.Object{}, fmt.Errorf("upload %s: not in the spool %s, and the store: %w", key, s.local.Root(), serr)
		}
		return stored, nil
	} else if err != nil {
		return vocab.Object{}, fmt.Errorf("upload %s: %w", key, err)
	}
	up, err := s.upload(ctx, obj)
	if err != nil {
		if ctx.Err() == nil && Unavailable(err) {
			s.markDown()
		}
		return vocab.Object{}, err
	}
	return up, nil
}

// upload puts the spool file of obj into the primary as it is and, once the
// primary holds it, deletes the file (a crash in between leaves a file whose
// re-upload is an idempotent success).
func (s *Spool) upload(ctx context.Context, obj vocab.Object) (vocab.Object, error) {
	rc, stored, err := s.local.OpenStored(ctx, obj.Key)
	if err != nil {
		return vocab.Object{}, fmt.Errorf("upload %s: %w", obj.Key, err)
	}
	up, err := s.primary.PutStored(ctx, stored, rc)
	rc.Close()
	if err != nil {
		return vocab.Object{}, err
	}
	s.mu.Lock()
	s.downUntil = time.Time{}
	s.mu.Unlock()
	if err := s.local.Delete(context.WithoutCancel(ctx), obj.Key); err != nil {
		return vocab.Object{}, fmt.Errorf("uploaded %s, but removing its spool file failed: %w", obj.Key, err)
	}
	return up, nil
}

// Spooled calls fn for each object kept in the spool, oldest first, except
// those a Put is writing or uploading right now. mtime is when it was spooled.
func (s *Spool) Spooled(ctx context.Context, fn func(obj vocab.Object, spooled time.Time) error) error {
	type entry struct {
		obj vocab.Object
		at  time.Time
	}
	var all []entry
	err := s.local.List(ctx, "", func(e vocab.ListEntry) error {
		if s.busy(e.Key) {
			return nil
		}
		obj, err := s.local.Stat(ctx, e.Key)
		if errors.Is(err, ErrNotFound) {
			return nil // uploaded meanwhile
		} else if err != nil {
			return err
		}
		fi, err := os.Stat(filepath.Join(s.local.Root(), filepath.FromSlash(e.Key)))
		if err != nil {
			return nil
		}
		all = append(all, entry{obj, fi.ModTime()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("spool %s: %w", s.local.Root(), err)
	}
	for i := 1; i < len(all); i++ { // insertion sort: the spool is small
		for j := i; j > 0 && all[j].at.Before(all[j-1].at); j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	for _, e := range all {
		e.obj.Pending = true
		if err := fn(e.obj, e.at); err != nil {
			return err
		}
	}
	return nil
}

// Has reports whether key is kept in the spool.
func (s *Spool) Has(ctx context.Context, key string) bool {
	_, err := s.local.Stat(ctx, key)
	return err == nil
}

// Open reads key from the primary, else from the spool.
func (s *Spool) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.primary.Open(ctx, key)
	if err != nil && s.Has(ctx, key) {
		return s.local.Open(ctx, key)
	}
	return rc, err
}

// OpenStored reads key's stored bytes from the primary, else from the spool
// (the Object then has Pending set).
func (s *Spool) OpenStored(ctx context.Context, key string) (io.ReadCloser, vocab.Object, error) {
	rc, obj, err := s.primary.OpenStored(ctx, key)
	if err != nil && s.Has(ctx, key) {
		rc, obj, err = s.local.OpenStored(ctx, key)
		obj.Pending = err == nil
	}
	return rc, obj, err
}

// Stat describes key from the primary, else from the spool (Pending set).
func (s *Spool) Stat(ctx context.Context, key string) (vocab.Object, error) {
	obj, err := s.primary.Stat(ctx, key)
	if err != nil && s.Has(ctx, key) {
		obj, err = s.local.Stat(ctx, key)
		obj.Pending = err == nil
	}
	return obj, err
}

// Link is the primary's link (an object still spooled is not there yet: a
// caller that knows it is pending says so instead).
func (s *Spool) Link(ctx context.Context, key string) (string, time.Duration, error) {
	return s.primary.Link(ctx, key)
}

// Delete removes key from the primary and from the spool.
func (s *Spool) Delete(ctx context.Context, key string) error {
	if err := s.local.Delete(ctx, key); err != nil {
		return err
	}
	return s.primary.Delete(ctx, key)
}

// List lists the primary: uploaded objects only.
func (s *Spool) List(ctx context.Context, prefix string, fn func(vocab.ListEntry) error) error {
	return s.primary.List(ctx, prefix, fn)
}

func (s *Spool) begin(key string) {
	s.mu.Lock()
	s.inFlight[key]++
	s.mu.Unlock()
}

func (s *Spool) end(key string) {
	s.mu.Lock()
	if s.inFlight[key]--; s.inFlight[key] <= 0 {
		delete(s.inFlight, key)
	}
	s.mu.Unlock()
}

func (s *Spool) busy(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[key] > 0
}

func (s *Spool) skipPrimary() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now().Before(s.downUntil)
}

func (s *Spool) markDown() {
	if s.DownFor < 0 {
		return
	}
	s.mu.Lock()
	s.downUntil = s.now().Add(s.DownFor)
	s.mu.Unlock()
}

// Unavailable reports whether err says the store could not be reached or
// could not serve now (connection refused or reset, a timeout, DNS, a 5xx,
// 429, SlowDown): an outage worth waiting out, as opposed to a request that
// will keep failing the same way (a conflict, access denied, a missing bucket,
// a malformed request, a bad key) or a caller that stopped (context.Canceled;
// a caller whose deadline passed checks its own ctx.Err()).
func Unavailable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, ErrConflict),
		errors.Is(err, vocab.ErrStoreAccessDenied), errors.Is(err, vocab.ErrStoreNoBucket), errors.Is(err, vocab.ErrStoreWrongRegion),
		errors.Is(err, vocab.ErrStoreNoCredentials), errors.Is(err, vocab.ErrStoreBadRequest):
		return false
	case errors.Is(err, vocab.ErrStoreUnreachable), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		c := re.HTTPStatusCode()
		if c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout {
			return true
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException":
			return true
		}
	}
	var se *smithyhttp.RequestSendError
	var qe ratelimit.QuotaExceededError
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &se) || errors.As(err, &qe) || errors.As(err, &ne) || errors.As(err, &oe) || errors.As(err, &de) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}
