-- 13 (profiles, profiles.go): stall_ms on autocapture_profile_starts, how long
-- a capture's stop kept the target from serving (SGLang's export freezes its
-- scheduler, vLLM's flush blocks its engine), written once the capture was
-- measured, so a later capture of the target, on any replica, can refuse to
-- run when the last one stalled serving longer than its bound. NULL: not
-- measured (an older capture, or a daemon that died before measuring).
ALTER TABLE autocapture_profile_starts ADD COLUMN stall_ms BIGINT;
