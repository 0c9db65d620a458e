-- 6: autocapture_feedback, readers' answers to a run's verdict (the Slack
-- buttons): one row per run and user, a change of mind overwrites it.
-- correct is 0 or 1 (INTEGER on both databases).
CREATE TABLE autocapture_feedback (
	run_id    TEXT NOT NULL REFERENCES autocapture_runs (id) ON DELETE CASCADE,
	user_id   TEXT NOT NULL,
	user_name TEXT NOT NULL DEFAULT '',
	verdict   TEXT NOT NULL,
	correct   INTEGER NOT NULL,
	at        BIGINT NOT NULL,
	PRIMARY KEY (run_id, user_id)
);
