-- 5: the outbox (outbox.go, deliver.go): outbox_seq, a run's counter of outbox
-- entries; autocapture_threads, each run's thread per sink with the lease of the
-- replica pumping it (pump_owner, pump_until); autocapture_outbox, the thread
-- operations to deliver per run and sink in seq order, one per op_key, with
-- attempts, the last error and when it was delivered.
ALTER TABLE autocapture_runs ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0;
CREATE TABLE autocapture_threads (
	run_id     TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	sink       TEXT NOT NULL,
	thread     TEXT,
	pump_owner TEXT,
	pump_until BIGINT,
	PRIMARY KEY (run_id, sink)
);
CREATE TABLE autocapture_outbox (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	sink         TEXT NOT NULL,
	seq          INTEGER NOT NULL,
	op           TEXT NOT NULL,
	op_key       TEXT NOT NULL,
	ref          TEXT NOT NULL DEFAULT '',
	created_at   BIGINT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	last_error   TEXT NOT NULL DEFAULT '',
	delivered_at BIGINT,
	PRIMARY KEY (run_id, sink, seq)
);
CREATE UNIQUE INDEX autocapture_outbox_key ON autocapture_outbox (run_id, sink, op_key);
CREATE INDEX autocapture_outbox_pending ON autocapture_outbox (created_at) WHERE delivered_at IS NULL;
