package profiling

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// profileMetrics are tier 3's: counters of this process, and gauges read from
// the lease table at scrape time (the same on every replica).
type profileMetrics struct {
	stopFailures prometheus.Counter
	sweeps       prometheus.Counter
	sweepActions *prometheus.CounterVec
	stepResults  *prometheus.CounterVec
}

// Profile step results (autocapture_profile_steps_total{result}), read from
// the step's record when it is persisted (countProfileStep).
const (
	profileCaptured  = "captured"    // framed, stopped and collected
	profileResumed   = "resumed"     // an interrupted attempt's frame stopped (by the step or the sweeper) and collected
	profileCut       = "cut"         // the frame ended early (operator's stop, alert resolved, run cancelled, lost renewal)
	profileNotArmed  = "not_armed"   // start_profile answered 404
	profileStopFail  = "stop_failed" // stop_profile failed or passed stop_timeout: the target stays leased
	profileLeaseLost = "lease_lost"  // the lease was taken over before the stop (the sweeper stops the server)
	profileOptedOut  = "opted_out"   // profiling.opt_out
	profileFailed    = "failed"      // any other error (preflight, lease store, config)
	// refused_<kind>: vocab.Refused* (busy, paused, budget, cooldown, recorded).
	profileRefusedPrefix = "refused_"
)

// profileRefusals are the refusal kinds counted by name; any other is refused_other.
var profileRefusals = []string{vocab.RefusedBusy, vocab.RefusedPaused, vocab.RefusedBudget,
	vocab.RefusedCooldown, vocab.RefusedRecorded}

// profileStepResult is what a finished profile step's record says happened,
// "" for a step that never ran (its `when` was false, the alert resolved
// first, the run stopped, something it needs is not configured): those are
// autocapture_steps_total's alone.
func profileStepResult(rec executor.StepRecord) string {
	f := rec.Findings
	if f == nil && rec.Status == vocab.StatusSkipped || rec.Status == vocab.StatusNotConfigured {
		return "" // never framed: no agent token is not a failed capture
	}
	if kind, ok := f["refused"].(string); ok {
		if !slices.Contains(profileRefusals, kind) {
			kind = "other"
		}
		return profileRefusedPrefix + kind
	}
	switch {
	case f["opted_out"] != nil:
		return profileOptedOut
	case f["armed"] == false:
		return profileNotArmed
	case f["lease_lost"] == true:
		return profileLeaseLost
	case f["stop_error"] != nil:
		return profileStopFail
	case rec.Status == vocab.StatusSucceeded && f["resumed"] != nil:
		return profileResumed
	case f["cut_short"] != nil || rec.Status == vocab.StatusCancelled:
		return profileCut
	case rec.Status == vocab.StatusSucceeded:
		return profileCaptured
	}
	return profileFailed
}

// countProfileStep counts a persisted profile step by its result.
func (m profileMetrics) countProfileStep(rec executor.StepRecord) {
	if rec.Kind != "profile" {
		return
	}
	if r := profileStepResult(rec); r != "" {
		m.stepResults.WithLabelValues(r).Inc()
	}
}

var (
	descProfileLeases = prometheus.NewDesc("autocapture_profile_leases",
		"Targets held by a capture, by lease state (held, recording, stopping, stop_failed, stopped).", []string{"state"}, nil)
	descProfilePastDeadline = prometheus.NewDesc("autocapture_profile_recordings_past_deadline",
		"Captures still recording or stopping after their deadline (the sweeper stops them once their owner is gone).", nil, nil)
	descProfilePaused = prometheus.NewDesc("autocapture_profiling_paused",
		"1 while an operator has paused profiling fleet-wide.", nil, nil)
)

// profileLeaseStates are the states a lease row may hold.
var profileLeaseStates = []string{vocab.LeaseHeld, vocab.LeaseRecording, vocab.LeaseStopping,
	vocab.LeaseStopFailed, vocab.LeaseStopped}

func newProfileMetrics() profileMetrics {
	m := profileMetrics{
		stopFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_profile_stop_failures_total",
			Help: "Stops of a profile that failed or passed their timeout (by a step or the sweeper) in this process."}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Name: "autocapture_profile_sweeps_total",
			Help: "Profile sweeps this process ran."}),
		sweepActions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_profile_sweep_actions_total",
			Help: "What this process's profile sweeps did: released (owner gone, nothing recording), stopped, stop_failed."},
			[]string{"action"}),
		stepResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_profile_steps_total",
			Help: "Profile steps this process finished, by result: captured, resumed, cut, not_armed, stop_failed, lease_lost, " +
				"opted_out, failed, refused_<kind> (busy, paused, budget, cooldown, recorded). Steps that never ran (when false) are not counted."},
			[]string{"result"}),
	}
	for _, a := range []string{"released", "stopped", vocab.LeaseStopFailed} {
		m.sweepActions.WithLabelValues(a)
	}
	for _, r := range []string{profileCaptured, profileResumed, profileCut, profileNotArmed, profileStopFail,
		profileLeaseLost, profileOptedOut, profileFailed} {
		m.stepResults.WithLabelValues(r)
	}
	for _, k := range append(slices.Clone(profileRefusals), "other") {
		m.stepResults.WithLabelValues(profileRefusedPrefix + k)
	}
	return m
}

func (m profileMetrics) collectors(pl *Plane) []prometheus.Collector {
	return []prometheus.Collector{m.stopFailures, m.sweeps, m.sweepActions, m.stepResults, profileCollector{pl: pl}}
}

// profileCollector reads the lease table at scrape time. A store that does
// not answer leaves its series out of the scrape, as the runner's
// storeCollector does: autocapture_runs_store_up says the store is down, and
// an invalid metric would fail the whole scrape (promhttp answers 500), that
// gauge with it.
type profileCollector struct{ pl *Plane }

func (c profileCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProfileLeases
	ch <- descProfilePastDeadline
	ch <- descProfilePaused
}

func (c profileCollector) Collect(ch chan<- prometheus.Metric) {
	pl := c.pl
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a scrape has no context
	defer cancel()
	counts := map[string]float64{}
	for _, st := range profileLeaseStates {
		counts[st] = 0
	}
	byState, err := pl.tables.ProfileLeases.CountByState(ctx, pl.db)
	if err != nil {
		return
	}
	maps.Copy(counts, byState)
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descProfileLeases, prometheus.GaugeValue, n, st)
	}
	if past, err := pl.tables.ProfileLeases.PastDeadline(ctx, pl.db, vocab.LeaseRecording, vocab.LeaseStopping); err == nil {
		ch <- prometheus.MustNewConstMetric(descProfilePastDeadline, prometheus.GaugeValue, past)
	}
	if p, err := pl.readPause(ctx, pl.db); err == nil {
		v := 0.0
		if p.paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descProfilePaused, prometheus.GaugeValue, v)
	}
}
