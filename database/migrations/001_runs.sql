-- 1: the run store: autocapture_runs (one row per alert run: its key and
-- fingerprint, the alert, status, lease, plans, window, thread and verdict),
-- autocapture_run_playbooks (the playbooks a run chose, with the cooldown key
-- each held) and autocapture_steps (each step's record, with its cooldown key).
CREATE TABLE autocapture_runs (
	id                  TEXT PRIMARY KEY,
	run_key             TEXT NOT NULL UNIQUE,
	fingerprint         TEXT NOT NULL,
	alertname           TEXT NOT NULL,
	alert               TEXT NOT NULL,
	starts_at           BIGINT NOT NULL,
	status              TEXT NOT NULL,
	reason              TEXT NOT NULL DEFAULT '',
	resolved_at         BIGINT,
	cancel_requested_at BIGINT,
	created_at          BIGINT NOT NULL,
	queued_at           BIGINT NOT NULL,
	started_at          BIGINT,
	finished_at         BIGINT,
	attempts            INTEGER NOT NULL DEFAULT 0,
	resumed             INTEGER NOT NULL DEFAULT 0,
	generation          INTEGER NOT NULL DEFAULT 0,
	owner               TEXT,
	lease_until         BIGINT,
	plans               TEXT,
	window_start        BIGINT,
	window_end          BIGINT,
	thread              TEXT,
	verdict             TEXT
);
CREATE UNIQUE INDEX autocapture_runs_open_fingerprint ON autocapture_runs (fingerprint) WHERE resolved_at IS NULL;
CREATE INDEX autocapture_runs_created ON autocapture_runs (created_at, id);
CREATE INDEX autocapture_runs_status ON autocapture_runs (status);
CREATE TABLE autocapture_run_playbooks (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	playbook     TEXT NOT NULL,
	cooldown_key TEXT NOT NULL DEFAULT '',
	created_at   BIGINT NOT NULL,
	PRIMARY KEY (run_id, playbook)
);
CREATE INDEX autocapture_run_playbooks_cooldown ON autocapture_run_playbooks (cooldown_key, created_at);
CREATE TABLE autocapture_steps (
	run_id       TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	plan         TEXT NOT NULL,
	step_id      TEXT NOT NULL,
	kind         TEXT NOT NULL,
	status       TEXT NOT NULL,
	cooldown_key TEXT NOT NULL DEFAULT '',
	finished_at  BIGINT NOT NULL,
	record       TEXT NOT NULL,
	PRIMARY KEY (run_id, plan, step_id)
);
CREATE INDEX autocapture_steps_cooldown ON autocapture_steps (cooldown_key, finished_at);
