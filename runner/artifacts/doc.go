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
//
// # The manifest
//
// The manifest: one manifest.json per finished run, beside its plans'
// folders (storage.ManifestKey), saying what was captured and where: the
// alert, the playbooks with file and digest, every step with its rendered
// config, timings, outcome, findings and artifacts (key, size, sha256,
// content type and encoding), the verdict and its history, the run's status and times, and
// the versions of autocapture and of the target. It is what someone reading
// the bucket, without the daemon, starts from.
//
// It is written by a River job (manifestArgs, on Queue)
// inserted in the SAME transaction as the run's finish (EnqueueManifestTx in
// the runner's finish): a kill -9 before that commit leaves an unfinished run and no job
// (the run resumes and finishes again); after it, both, and the job is worked
// by any live replica, whoever finished the run. The window that remains is
// between the manifest's Put and the job's completion: the job is then run
// again and writes the same bytes once more. A job whose worker died holds
// "running" in River's table until River's rescuer (an hour); the reaper
// does not wait for it: a manifest job running past max(30 s, 2 × lease)
// gets a fresh one (sweep.go), and duplicate writers are harmless under
// manifest_seq.
//
// The manifest is the only object ever rewritten (vocab.ObjectMeta.Replace):
// late uploads (upload.go) have the runner call EnqueueManifestTx when they
// land.
// Each request bumps autocapture_runs.manifest_seq; a writer reads the seq
// before the state it writes, and after its Put writes again while the seq
// moved, so the last Put for a run is of its latest state even when two
// replicas write at once.
//
// What the manifest says of the run (its row, plans, records, verdicts) is
// the run lifecycle's: the writer asks for it (Runs.ManifestOf) and puts it
// together with what the store says of each artifact (BuildManifest).
//
// # Late uploads
//
// Late uploads. With an S3 store, an artifact put while the bucket is down
// stays in this replica's local spool (storage.Spool) and its step records it
// pending. The upload is then durable work of THIS replica: a row in
// autocapture_uploads (one per key) and a River job on the replica's own
// queue, autocapture_upload_<replica>, because only the replica holding the
// file can upload it. That is why a replica needs a stable name (runs.replica,
// default the hostname) and its spool a persistent volume: in Kubernetes a
// StatefulSet with a volume claim for storage.path. A replica that never
// comes back takes its spooled artifacts with it.
//
// The job retries with a backoff from 1 s doubling to 5 min, for as long as
// it takes (it snoozes, so River's attempt limit never discards it; the row
// counts attempts and keeps the last error). After the upload the spool file
// is deleted and the row marked uploaded; when the run's last pending upload
// lands, its thread is told so (an outbox reply, "uploads/done/<n>").
//
// Crash windows (kill -9), each covered:
//   - the spool file written, no row or job yet (between storage.Spool's
//     write and the OnSpool hook, or the hook's transaction failed): at
//     startup the replica scans its spool and records a row and a job for
//     every file; a scan every
//     uploadScanInterval does the same for files without a row.
//   - uploaded, spool file not deleted: the next attempt uploads again, and
//     the store's never-overwrite compare makes that an idempotent success
//     (same content).
//   - uploaded and spool file deleted, row not marked: the row is pending
//     without a file; its job (or the startup scan's, see below) finds the
//     key in the store with the recorded sha256 and marks it.
//   - row recorded, job lost or held by the dead process as running: the
//     startup scan inserts a job for every pending row of this replica
//     (unique per key and process).
package artifacts
