-- 3: river_job_id, the job of the run's current generation (see enqueue), so
-- the reaper's stranded check is a primary-key join instead of a search of
-- every live job's args per queued run; filled for unfinished runs from the
-- jobs' args (one pass over river_job).
ALTER TABLE autocapture_runs ADD COLUMN river_job_id BIGINT;
UPDATE autocapture_runs SET river_job_id = j.id FROM river_job j
	WHERE autocapture_runs.finished_at IS NULL AND j.kind = 'autocapture_run'
	AND j.args->>'run_id' = autocapture_runs.id
	AND CAST(j.args->>'generation' AS INTEGER) = autocapture_runs.generation;
