-- 15 (actions, actions.go): autocapture_actions, what people did from a
-- run's thread (a silence in Alertmanager, its end): one row per action,
-- written before the call it makes and finished after, so a click repeated
-- or retried, or a process killed mid-call, never makes the call's effect
-- twice. id is the interaction (run, action, message and click time); slot
-- is set while the action holds its run's one live silence (unique: a
-- double click finds the first), cleared when it fails or is expired;
-- claimed_until is the lease of whoever makes its call now, so a stale
-- pending row is resumed by the next click or the sweep.
CREATE TABLE autocapture_actions (
	id            TEXT PRIMARY KEY,
	run_id        TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	kind          TEXT NOT NULL,
	arg           TEXT NOT NULL DEFAULT '',
	user_id       TEXT NOT NULL,
	user_name     TEXT NOT NULL DEFAULT '',
	state         TEXT NOT NULL,
	slot          TEXT UNIQUE,
	silence_id    TEXT,
	ends_at       BIGINT,
	detail        TEXT NOT NULL DEFAULT '',
	attempt       INTEGER NOT NULL DEFAULT 0,
	claimed_until BIGINT NOT NULL,
	created_at    BIGINT NOT NULL,
	done_at       BIGINT
);
CREATE INDEX autocapture_actions_run ON autocapture_actions (run_id, created_at);
CREATE INDEX autocapture_actions_pending ON autocapture_actions (state, claimed_until);
