-- 10 (groups, group.go): threads several runs share. autocapture_groups has a
-- row per group keyed by its lead run (the run whose outbox and thread the
-- group uses), with the outbox counter of that thread; group_lead on a run
-- names its group. autocapture_fleets holds each (alertname, model, channel)
-- key's open fleet, claimed in the Accept transaction.
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
