// Package capture holds the one registry of step kinds (registry.go) and
// registers every kind a playbook can run (kinds.go). Each kind is a step
// family's package that declares its Kind: capture/prometheus,
// capture/peers, capture/gpu, capture/scrape, capture/triage,
// capture/profile, capture/traces, capture/httpstep, capture/chart. What the
// families share is in capture/internal (stepkit, exposition, promkit, views).
// The tests here run families together (a real Prometheus under the
// prometheus, peers, gpu, scrape and triage steps; the shipped playbooks).
// A step does one thing; the runner owns deadlines, retries and ordering. The
// words a step shares with the rest of the daemon (Step, Input, Env, Result,
// Verdict, reasons, tiers, signals, the profile lease) are in package vocab;
// outside capture, import capture only for its registry and a kind's own API
// (see vocab's package doc).
package capture
