// Package storage is where artifacts go: a local folder (Local) or an
// S3-compatible bucket (S3). Every backend streams: nothing is held whole in
// memory, and the bytes are hashed, counted and (for text) compressed on the
// way. See README.md for the configuration, the IAM policy and the key layout.
package storage

import (
	"errors"
)

// ErrNotFound is returned for a missing key.
var ErrNotFound = errors.New("storage: no such object")

// ErrConflict is returned by Put when the key already holds different content.
var ErrConflict = errors.New("storage: key already holds different content")
