// Package capture holds the step kinds a playbook can run, each registered into
// one table (registry.go): one file per kind here, or a step family's package
// (capture/profile, capture/traces, capture/httpstep, capture/chart) whose Kind
// kinds.go registers. What the families share is in capture/internal (stepkit,
// vllmexpo, steptest). A step does one thing; the runner owns deadlines,
// retries and ordering. The words a step shares with the rest of the daemon
// (Step, Input, Env, Result, Verdict, reasons, tiers, signals, the profile
// lease) are in package vocab; outside capture, import capture only for its
// registry and a kind's own API (see vocab's package doc).
package capture
