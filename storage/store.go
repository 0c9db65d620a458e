// Package storage is where artifacts go: a local folder by default, S3-compatible
// storage later. Every backend streams: nothing is held whole in memory.
package storage

import (
	"context"
	"errors"
	"io"
)

// Store keeps artifacts under keys made by Key.
type Store interface {
	// Put streams r into key. The key must be valid (see ValidKey).
	Put(ctx context.Context, key string, r io.Reader, meta Meta) (Object, error)
	// Link returns a URL a person can open (a file:// URL, or a presigned URL later).
	Link(ctx context.Context, key string) (string, error)
	// Open reads an object back.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// Meta describes an object being stored.
type Meta struct {
	ContentType string
}

// Object is what was stored.
type Object struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ErrNotFound is returned by Open for a missing key.
var ErrNotFound = errors.New("storage: no such object")
