// Package vocab is the words every package of autocapture shares about a run:
// what a step is given and what it answers, and how the rest of the daemon
// speaks of it. It imports only the standard library and two third-party
// packages the step contract names (Alertmanager's template.Alert, zap's
// Logger); never a package of ours (leaf_test.go checks it), so anything may
// import it.
//
// What belongs here:
//
//   - the step contract: Step, Input, Env (with Endpoint, TracesEndpoint and
//     the artifact Store it writes to), Window and AlertWindow, Result and
//     Artifact;
//   - verdicts and their wording: the verdict ids (Verdicts), Verdict, the
//     scope and contributing-factor words (Scope*, Factor*, FactorAdvice,
//     ScopeLine, ScopeText, AllAdvice) and the Basis* of a judged signal;
//   - why a step failed or did not run: Reason and Reasons, Error, Errorf,
//     Classify, SkipError, NotConfiguredError, and the store's errors
//     (ErrStore*, which package storage returns);
//   - where a run or a step stands: Status, the Status* words, RunStatuses,
//     ParseRunStatus;
//   - the tiers (Tier, Tiers, ParseTier);
//   - the signal names (Sig*, SignalNames, Signals, Origin, the baseline
//     suffixes, the findings keys a metrics step describes its signals with,
//     SourcePromQL and SourceScrape);
//   - the profile lease the control plane and the profile step exchange:
//     ProfileGuard, ProfileLease, LeaseRequest, the Lease* states, Recording,
//     the Refused* refusals and ProfileRefusal, ErrLeaseLost, KeptReport,
//     BaselineRef and the daemon's Profiling policy;
//   - the artifact store's contract (Store, ObjectMeta, Object, ListEntry),
//     which package storage implements.
//
// What does not: how a step kind works. Package capture holds the one registry
// of step kinds (Register, Lookup, Kinds, taking a Kind) and the
// kinds, each in its own family's package (capture/prometheus,
// capture/peers, capture/gpu, capture/scrape, capture/triage,
// capture/profile, capture/traces, capture/httpstep, capture/chart) that
// declares its Kind for the registry. Outside capture/, a package imports capture
// only for
//
//   - the registry: Kind, Register, Lookup, Kinds;
//   - a kind's own API: its config type (…Config) or constructor (New…) when
//     a test builds or inspects one step;
//
// and a family's package only for that family's own API (the profile
// step's report, profile.Report, and the calls to a vLLM profiler that the
// runner's sweeper shares, StopProfile and ErrNotArmed; the gpu step's DCGM
// table, gpu.DCGMFields); never for a word listed above (leaf_test.go checks
// capture's side of that). A new word the
// runner, the notifiers or the handlers need from a step goes here.
package vocab
