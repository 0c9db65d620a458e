// Package agent is the profile sidecar: it runs beside vLLM on the volume the
// torch profiler writes into and serves those files, to the daemon only (a
// bearer token), so the daemon can collect a profile from a pod whose disk it
// cannot see. Dir reads a local folder; Server serves a Dir over HTTP; Client
// reads a Server. Dir and Client have the same methods: the profile step
// collects through either.
//
// The wire protocol (every /v1 route needs "Authorization: Bearer <token>"):
//
//	GET    /v1/files?since=<RFC3339Nano>  {"files":[File…],"now":<agent clock>}
//	GET    /v1/files/{name...}            the file, streamed (Range, Last-Modified)
//	DELETE /v1/files/{name...}            204: removed (after upload)
//	GET    /healthz                       200 while the folder is readable (no auth)
//	GET    /metrics                       Prometheus metrics (no auth: counts only)
//
// A name is slash-separated and relative to the folder; one with "..", an
// absolute path, or a symlink out of the folder is answered 404, as a missing
// file is, and so is anything not a regular file (a folder, a FIFO). The
// folder is opened as an os.Root, which resolves every element of a name
// inside it (symlinks included), so the refusal is not a string check alone.
package agent

import (
	"errors"
	"time"
)

// File is one file in the profiler's folder.
type File struct {
	// Name is the path relative to the folder, slash-separated.
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// Listing is a List answer with the clock of the side that listed: pass Now
// as the next since, so a skew between the daemon's and the pod's clocks
// cannot hide a file.
type Listing struct {
	Files []File    `json:"files"`
	Now   time.Time `json:"now"`
}

// ErrNotFound: no such file (or a name that escapes the folder).
var ErrNotFound = errors.New("agent: file not found")
