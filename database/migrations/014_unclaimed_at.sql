-- 14 (runs, reap): autocapture_runs.unclaimed_at, when (the database's clock,
-- Unix ms) a worker last handed the run back to the queue without running it
-- (a playbook's max_concurrent had no slot: the job snoozes). River's
-- completer writes the snooze after the worker returns, asynchronously; until
-- it does, the job still reads 'running' with the attempted_at of its fetch,
-- which the reaper's stranded check took for a process that died between
-- fetch and claim once that fetch was lease_timeout old (seen under load: a
-- spurious resume of a waiting run). A run unclaimed within lease_timeout is
-- not stranded.
ALTER TABLE autocapture_runs ADD COLUMN unclaimed_at BIGINT;
