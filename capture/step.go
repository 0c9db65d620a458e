// Package capture holds the step registry (registry.go) and the step kinds a
// playbook can run: a step family's package (capture/prometheus,
// capture/peers, capture/gpu, capture/profile, capture/traces,
// capture/httpstep, capture/chart) declares its Kind and kinds.go registers
// it; scrape and triage still register from their own files here. What the
// families share is in capture/internal (stepkit, vllmexpo, promkit, views).
// A step does one thing; the runner owns deadlines, retries and ordering. The
// words a step shares with the rest of the daemon (Step, Input, Env, Result,
// Verdict, reasons, tiers, signals, the profile lease) are in package vocab;
// outside capture, import capture only for its registry and a kind's own API
// (see vocab's package doc).
package capture
