-- 11 (profiles, profile*.go): the tier-3 guard. autocapture_profile_leases
-- has one row per target while a capture holds it (owner the replica, token
-- the lease's own, so a process that lost it can change nothing), its state
-- (vocab.LeaseHeld…), since/deadline of the recording, lease_until renewed
-- by the owner, an operator's stop request, what the step saved, and why a
-- stop failed. autocapture_profile_starts counts starts for max_per_hour and
-- the per-target cooldown; autocapture_profile_pause is the one fleet-wide
-- pause row (paused, who changed it last, when, why);
-- autocapture_profile_reports keeps analyses for baselines;
-- autocapture_profile_events is each lease's audit trail, shown on its run.
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
