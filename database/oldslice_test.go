package database

// oldMigrations is the Go slice runner/db.go applied before the migrations
// became files (commit 702d0dd), kept verbatim so TestMigrateAcceptsTheOldSlice
// can build a database the way the old code did.
var oldMigrations = []string{`
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
`, `
CREATE TABLE autocapture_cooldowns (
	scope        TEXT NOT NULL,
	cooldown_key TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	claimed_at   BIGINT NOT NULL,
	PRIMARY KEY (scope, cooldown_key)
);
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'playbook', cooldown_key, MAX(run_id), MAX(created_at) FROM autocapture_run_playbooks
	WHERE cooldown_key <> '' GROUP BY cooldown_key;
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'step', cooldown_key, MAX(run_id), MAX(finished_at) FROM autocapture_steps
	WHERE cooldown_key <> '' AND status = 'succeeded' GROUP BY cooldown_key;
ALTER TABLE autocapture_runs ADD COLUMN slot_generation INTEGER;
UPDATE autocapture_runs SET slot_generation = generation
	WHERE finished_at IS NULL AND owner IS NOT NULL AND plans IS NOT NULL;
`, `
ALTER TABLE autocapture_runs ADD COLUMN river_job_id BIGINT;
UPDATE autocapture_runs SET river_job_id = j.id FROM river_job j
	WHERE autocapture_runs.finished_at IS NULL AND j.kind = 'autocapture_run'
	AND j.args->>'run_id' = autocapture_runs.id
	AND CAST(j.args->>'generation' AS INTEGER) = autocapture_runs.generation;
`, `
CREATE INDEX autocapture_runs_lease ON autocapture_runs (lease_until) WHERE finished_at IS NULL;
CREATE INDEX autocapture_runs_fingerprint ON autocapture_runs (fingerprint, created_at);
CREATE INDEX autocapture_runs_alertname ON autocapture_runs (alertname, created_at, id);
`, `
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
`, `
CREATE TABLE autocapture_feedback (
	run_id    TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	user_id   TEXT NOT NULL,
	user_name TEXT NOT NULL DEFAULT '',
	verdict   TEXT NOT NULL,
	correct   INTEGER NOT NULL,
	at        BIGINT NOT NULL,
	PRIMARY KEY (run_id, user_id)
);
`, `
CREATE TABLE autocapture_keys (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`, `
ALTER TABLE autocapture_runs ADD COLUMN manifest_key TEXT;
ALTER TABLE autocapture_runs ADD COLUMN manifest_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX autocapture_runs_finished ON autocapture_runs (finished_at) WHERE finished_at IS NOT NULL;
`, `
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
`, `
CREATE TABLE autocapture_groups (
	lead_run   TEXT PRIMARY KEY REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	kind       TEXT NOT NULL,
	channel    TEXT NOT NULL DEFAULT '',
	opened_at  BIGINT NOT NULL,
	outbox_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE autocapture_fleets (
	fleet_key TEXT PRIMARY KEY,
	lead_run  TEXT NOT NULL,
	opened_at BIGINT NOT NULL
);
ALTER TABLE autocapture_runs ADD COLUMN group_lead TEXT;
CREATE INDEX autocapture_runs_group ON autocapture_runs (group_lead, created_at, id) WHERE group_lead IS NOT NULL;
`, `
CREATE TABLE autocapture_profile_leases (
	target            TEXT PRIMARY KEY,
	run_id            TEXT NOT NULL,
	plan              TEXT NOT NULL,
	step_id           TEXT NOT NULL,
	owner             TEXT NOT NULL,
	token             TEXT NOT NULL,
	state             TEXT NOT NULL,
	acquired_at       BIGINT NOT NULL,
	since             BIGINT,
	deadline          BIGINT,
	lease_until       BIGINT NOT NULL,
	stop_requested_at BIGINT,
	stop_requested_by TEXT NOT NULL DEFAULT '',
	stop_attempts     INTEGER NOT NULL DEFAULT 0,
	saved             TEXT,
	reason            TEXT NOT NULL DEFAULT ''
);
CREATE INDEX autocapture_profile_leases_run ON autocapture_profile_leases (run_id);
CREATE INDEX autocapture_profile_leases_until ON autocapture_profile_leases (lease_until);
CREATE TABLE autocapture_profile_starts (
	target     TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	plan       TEXT NOT NULL,
	step_id    TEXT NOT NULL,
	started_at BIGINT NOT NULL
);
CREATE INDEX autocapture_profile_starts_at ON autocapture_profile_starts (started_at);
CREATE INDEX autocapture_profile_starts_target ON autocapture_profile_starts (target, started_at);
CREATE INDEX autocapture_profile_starts_run ON autocapture_profile_starts (run_id);
CREATE TABLE autocapture_profile_pause (
	id         INTEGER PRIMARY KEY,
	paused     INTEGER NOT NULL,
	changed_by TEXT NOT NULL DEFAULT '',
	changed_at BIGINT NOT NULL DEFAULT 0,
	reason     TEXT NOT NULL DEFAULT ''
);
INSERT INTO autocapture_profile_pause (id, paused) VALUES (1, 0);
CREATE TABLE autocapture_profile_reports (
	report_key TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	target     TEXT NOT NULL,
	baseline   INTEGER NOT NULL,
	taken_at   BIGINT NOT NULL,
	report     TEXT NOT NULL,
	PRIMARY KEY (report_key, run_id)
);
CREATE INDEX autocapture_profile_reports_run ON autocapture_profile_reports (run_id);
CREATE TABLE autocapture_profile_events (
	run_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	target TEXT NOT NULL,
	at     BIGINT NOT NULL,
	actor  TEXT NOT NULL,
	event  TEXT NOT NULL,
	detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX autocapture_profile_events_run ON autocapture_profile_events (run_id, seq);
`, `
CREATE TABLE autocapture_verdicts (
	run_id      TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	plan        TEXT NOT NULL,
	step_id     TEXT NOT NULL,
	verdict_key TEXT NOT NULL,
	n           INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	at          BIGINT NOT NULL,
	record      TEXT NOT NULL,
	PRIMARY KEY (run_id, plan, step_id, verdict_key)
);
CREATE INDEX autocapture_verdicts_run ON autocapture_verdicts (run_id, n);
`}
