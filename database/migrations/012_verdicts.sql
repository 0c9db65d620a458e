-- 12 (verdicts, verdicts.go): autocapture_verdicts, a run's verdict history —
-- each preliminary verdict (keyed by the evidence it read) and the refined
-- one (key "refined") of a triage step, numbered n in the order recorded,
-- written in the transaction of the thread operation that shows it.
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
