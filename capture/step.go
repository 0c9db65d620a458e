// Package capture holds the step kinds a playbook can run: one file per kind, each
// registered into one table (registry.go). A step does one thing; the runner owns
// deadlines, retries and ordering. The words a step shares with the rest of the
// daemon (Step, Input, Env, Result, Verdict, reasons, tiers, signals, the profile
// lease) are in package vocab; outside capture, import capture only for its
// registry and a kind's own API (see vocab's package doc).
package capture
