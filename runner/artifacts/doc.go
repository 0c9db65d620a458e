// Package artifacts owns what happens to a run's artifacts around its steps:
// the run's byte cap over the store its steps put to (bytecap.go); the run's
// manifest.json, written by a River job after the finish and rewritten when
// what it describes changes (manifest.go, its sweep of writers that died in
// sweep.go); the late uploads of artifacts kept in this replica's spool
// while the store was down (upload.go: autocapture_uploads, a River job per
// key on the replica's own queue, the spool scans); and retention, which
// deletes old finished runs' objects and then their rows (retention.go: the
// leader's periodic job and its metrics); and the threads' links to
// artifacts, signed with the key the replicas share (links.go). One Keeper
// holds them (keeper.go).
//
// The runner is its composition root: it hands the Keeper its tables, its
// store (read at each use, the tests' crash seam) and what it needs of the
// run lifecycle (Runs: what a manifest says of a run, and the thread's reply
// and the manifest's rewrite once a run's uploads land).
package artifacts
