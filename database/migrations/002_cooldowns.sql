-- 2: cooldowns become claims (autocapture_cooldowns, one row per key, taken
-- atomically: see runner/grouping's claimCooldown), seeded from the runs and steps that held them
-- (the run id named is the key's newest, paired with its newest time only
-- approximately); slot_generation marks the runs that hold their playbooks'
-- max_concurrent slots (see runner/grouping's CheckSlot), seeded from the runs executing now.
CREATE TABLE autocapture_cooldowns (
	scope        TEXT NOT NULL,
	cooldown_key TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	claimed_at   BIGINT NOT NULL,
	PRIMARY KEY (scope, cooldown_key)
);
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'playbook', cooldown_key, MAX(run_id), MAX(created_at) FROM autocapture_run_playbooks
	WHERE cooldown_key <> '' GROUP BY cooldown_key;
INSERT INTO autocapture_cooldowns (scope, cooldown_key, run_id, claimed_at)
	SELECT 'step', cooldown_key, MAX(run_id), MAX(finished_at) FROM autocapture_steps
	WHERE cooldown_key <> '' AND status = 'succeeded' GROUP BY cooldown_key;
ALTER TABLE autocapture_runs ADD COLUMN slot_generation INTEGER;
UPDATE autocapture_runs SET slot_generation = generation
	WHERE finished_at IS NULL AND owner IS NOT NULL AND plans IS NOT NULL;
