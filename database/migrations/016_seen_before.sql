-- 16 (runs, seen.go): the seen-before query, a run's alert on the same
-- instance, or on the same model, within days. The alert's instance and
-- model_name labels are kept in columns (written by Insert, clipped as
-- alertname is), each indexed with alertname and created_at; the label
-- leads, so the index does not tempt the planner away from
-- autocapture_runs_alertname for a listing. Runs stored before this
-- migration have neither (''): they are not counted, and within the seven
-- days the line looks back the store fills in.
ALTER TABLE autocapture_runs ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE autocapture_runs ADD COLUMN model_name TEXT NOT NULL DEFAULT '';
CREATE INDEX autocapture_runs_seen_instance ON autocapture_runs (instance, alertname, created_at);
CREATE INDEX autocapture_runs_seen_model ON autocapture_runs (model_name, alertname, created_at);
