-- 9: autocapture_uploads, one row per artifact key spooled on a replica
-- while the artifact store was down (see upload.go): state pending|uploaded,
-- the stored size and sha256 the step recorded (to check what the store holds
-- when the spool file is gone), attempts and the last error for the API. No
-- foreign key to the run: the spool scan may find files of any run.
CREATE TABLE autocapture_uploads (
	object_key  TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL,
	replica     TEXT NOT NULL,
	size        BIGINT NOT NULL,
	sha256      TEXT NOT NULL,
	state       TEXT NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT NOT NULL DEFAULT '',
	created_at  BIGINT NOT NULL,
	uploaded_at BIGINT
);
CREATE INDEX autocapture_uploads_run ON autocapture_uploads (run_id, state);
CREATE INDEX autocapture_uploads_replica ON autocapture_uploads (replica, state);
