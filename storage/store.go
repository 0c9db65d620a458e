// Package storage is where artifacts go: a local folder (Local) or an
// S3-compatible bucket (S3). Every backend streams: nothing is held whole in
// memory, and the bytes are hashed, counted and (for text) compressed on the
// way. See README.md for the configuration, the IAM policy and the key layout.
package storage

import (
	"errors"

	"github.com/autocapture/autocapture/vocab"
)

// Store keeps artifacts under keys made by Key or ArtifactKey: the step
// contract's vocab.Store, which documents it. A key, once written, is never
// overwritten (a Put of different content fails with ErrConflict).
type Store = vocab.Store

// Meta describes an object being stored (vocab.ObjectMeta).
type Meta = vocab.ObjectMeta

// Object is what was stored (vocab.Object).
type Object = vocab.Object

// ListEntry is one object seen by List (vocab.ListEntry).
type ListEntry = vocab.ListEntry

// ErrNotFound is returned for a missing key.
var ErrNotFound = errors.New("storage: no such object")

// ErrConflict is returned by Put when the key already holds different content.
var ErrConflict = errors.New("storage: key already holds different content")
