-- 16 (runs, seen.go): the seen-before query, a run's alert on the same instance, or
-- on the same model, within days, read from the alert's labels by an index
-- on the expression, so no column is added and every run already stored
-- is counted. The label leads: an index led by alertname would tempt the
-- planner away from autocapture_runs_alertname for a listing.
CREATE INDEX autocapture_runs_seen_instance ON autocapture_runs ((CAST(alert AS jsonb) -> 'labels' ->> 'instance'), alertname, created_at);
CREATE INDEX autocapture_runs_seen_model ON autocapture_runs ((CAST(alert AS jsonb) -> 'labels' ->> 'model_name'), alertname, created_at);
