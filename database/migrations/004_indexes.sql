-- 4: indexes for the statements every replica runs all the time, which read
-- whole tables before: the reaper's expired leases and the playbook slot count
-- (runs_lease: unfinished runs only, so it stays as small as the work in
-- flight), a resolution's run by fingerprint (inside the accept transaction),
-- the list by alertname (newest first, the cursor's order).
CREATE INDEX autocapture_runs_lease ON autocapture_runs (lease_until) WHERE finished_at IS NULL;
CREATE INDEX autocapture_runs_fingerprint ON autocapture_runs (fingerprint, created_at);
CREATE INDEX autocapture_runs_alertname ON autocapture_runs (alertname, created_at, id);
