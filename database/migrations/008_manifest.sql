-- 8: the run's manifest (manifest.go): manifest_key once it is written,
-- manifest_seq bumped by every request to (re)write it, so a writer knows
-- whether what it wrote is current; and the index retention's scan of old
-- finished runs uses (retention.go).
ALTER TABLE autocapture_runs ADD COLUMN manifest_key TEXT;
ALTER TABLE autocapture_runs ADD COLUMN manifest_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX autocapture_runs_finished ON autocapture_runs (finished_at) WHERE finished_at IS NOT NULL;
