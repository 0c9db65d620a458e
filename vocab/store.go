package vocab

import (
	"context"
	"errors"
	"io"
	"time"
)

// The artifact store's contract: what Env.Store is. Package storage
// implements it (Local, S3, Spool), so a step, the runner and storage share
// one interface without vocab importing storage.

// Store keeps artifacts under keys made by storage.Key or storage.ArtifactKey.
//
// A key, once written, is never overwritten: Put of a key that exists with the
// same content (same bytes as originally put) is an idempotent success
// returning the stored Object; with different content it fails with
// storage.ErrConflict and leaves the stored object alone. So a step re-run
// after a resume can put again safely, and the SHA256 a run recorded stays
// true of what is stored.
type Store interface {
	// Put streams r into key, compressing text on the way when the store is
	// configured to (see storage.Compression), and reports what it stored.
	// The key must be valid (see storage.ValidKey).
	Put(ctx context.Context, key string, r io.Reader, meta ObjectMeta) (Object, error)
	// Link returns a URL a person can open and how long it works from now:
	// a file:// URL for Local (0: as long as the object is kept), a presigned
	// GET for S3 (S3Options.LinkExpiry, cut to what is left of temporary
	// signing credentials, which the URL cannot outlive).
	Link(ctx context.Context, key string) (url string, valid time.Duration, err error)
	// Open reads an object back as it was put (decompressing what the store
	// compressed). A missing key is storage.ErrNotFound.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// OpenStored reads the stored bytes as they are (still compressed when
	// Object.ContentEncoding is set), for serving them over HTTP with that
	// Content-Encoding. A missing key is storage.ErrNotFound.
	OpenStored(ctx context.Context, key string) (io.ReadCloser, Object, error)
	// Stat describes a stored object. A missing key is storage.ErrNotFound.
	Stat(ctx context.Context, key string) (Object, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix (a key
	// prefix, not necessarily a whole segment) until fn returns an error,
	// which List returns. An empty prefix lists all. Keys come sorted: S3
	// byte-wise, Local folder by folder (the two differ only where a name
	// sorts below "/", as "a.txt" and "a/b"); don't rely on more.
	List(ctx context.Context, prefix string, fn func(ListEntry) error) error
}

// ObjectMeta describes an object being stored.
type ObjectMeta struct {
	// ContentType is the MIME type of the bytes put; empty means guessed
	// from the key's extension, then from the first bytes.
	ContentType string
	// Replace allows Put to overwrite key: the one exception to "a key is
	// written once", for an object that is rewritten on purpose (a run's
	// manifest.json, rebuilt when late uploads land). See storage/replace.go. A key
	// written with Replace must always be written with Replace.
	Replace bool
}

// Object is what was stored.
type Object struct {
	// Key is the key given to Put (without a backend's prefix).
	Key string `json:"key"`
	// Size is the number of stored bytes (compressed, when ContentEncoding is set).
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the stored bytes.
	SHA256 string `json:"sha256"`
	// ContentType is the MIME type of the original bytes.
	ContentType string `json:"content_type,omitempty"`
	// ContentEncoding is "gzip" or "zstd" when the store compressed the bytes
	// on the way (as an HTTP Content-Encoding), empty when stored as put.
	ContentEncoding string `json:"content_encoding,omitempty"`
	// OriginalSize and OriginalSHA256 describe the bytes as put, when the
	// store compressed them; empty otherwise (then Size and SHA256 are those).
	OriginalSize   int64  `json:"original_size,omitempty"`
	OriginalSHA256 string `json:"original_sha256,omitempty"`
	// Pending says the bytes are kept in a replica's local spool because the
	// store was unavailable (see storage.Spool): they are uploaded later under the same
	// key, as the same stored bytes, so the rest of the Object stays true.
	Pending bool `json:"pending,omitempty"`
}

// ContentSHA256 is the SHA-256 of the bytes as put: OriginalSHA256 when the
// store compressed them, else SHA256. Two puts carry the same content exactly
// when their ContentSHA256 agree.
func (o Object) ContentSHA256() string {
	if o.ContentEncoding != "" {
		return o.OriginalSHA256
	}
	return o.SHA256
}

// ListEntry is one object seen by List.
type ListEntry struct {
	// Key is the object's key (without a backend's prefix).
	Key string
	// Size is the number of stored bytes.
	Size int64
}

// The reasons a store's error is given when a person must fix something
// (storage's S3 check wraps them; errors.Is finds them): Classify
// makes the first five bad-config and ErrStoreUnreachable unreachable.
var (
	ErrStoreAccessDenied  = errors.New("access denied (check the keys and the bucket policy)")
	ErrStoreNoBucket      = errors.New("no such bucket (create it, or check bucket and endpoint)")
	ErrStoreWrongRegion   = errors.New("the bucket is in another region (set region)")
	ErrStoreUnreachable   = errors.New("endpoint unreachable (check endpoint and network)")
	ErrStoreNoCredentials = errors.New("no credentials (set access_key_id and secret_access_key, or AWS_* variables, a shared profile, or IRSA)")
	ErrStoreBadRequest    = errors.New("request refused as malformed (check region and path_style)")
)
