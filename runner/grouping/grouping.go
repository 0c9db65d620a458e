// Package grouping decides, for the run service, who shares what: which new
// runs share a thread (a storm, a fleet: decided in the Accept transaction;
// group.go), which channel a run's thread goes to (channel.go), which run
// holds a playbook's or a step's cooldown and what a repeat inside it says in
// the holder's thread, and how many runs of a playbook execute at once (its
// max_concurrent slots; cooldown.go), with what a group's thread shows of its
// members (show.go) and its metrics. Its state is the group, fleet and
// cooldown tables of the run store (package database) and the runs' slot
// columns; it keeps nothing in memory.
//
// The run service (package runner) builds one Grouper and calls it inside
// its own transactions (each method that writes takes the *sql.Tx or the
// database.Querier the caller's transaction is), so what it decides commits
// or rolls back with the runs, the plans or the step it belongs to. What it
// needs of the runs is what their rows say (Runs); it records into threads
// through the outbox (Outbox).
package grouping

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Planner plans an alert (playbook matching, no I/O): Accept plans each
// candidate alert once for its channel (the run service's Planner).
type Planner interface {
	Plan(alert template.Alert, w vocab.Window) ([]*playbooks.Plan, error)
}

// Outbox is where a group's and a cooldown's thread operations are recorded,
// in the caller's transaction (*outbox.Outbox).
type Outbox interface {
	// Sinks are the notifiers' names: none, and no thread is recorded.
	Sinks() []string
	Append(ctx context.Context, tx *sql.Tx, runID string, ops ...outbox.Op) error
	AppendGroup(ctx context.Context, tx *sql.Tx, lead string, ops ...outbox.Op) error
}

var _ Outbox = (*outbox.Outbox)(nil)

// Runs is what grouping reads of the runs (the run service implements it):
// what a group's thread shows of its members.
type Runs interface {
	// Run reads a run with its steps (Steps filled); an error wrapping
	// runs.ErrNotFound when there is none.
	Run(ctx context.Context, runID string) (*runs.Run, error)
	// GroupRuns reads the runs of the group lead leads, in the order they
	// joined (Steps not filled).
	GroupRuns(ctx context.Context, lead string) ([]*runs.Run, error)
}

// Deps are what a Grouper is built from.
type Deps struct {
	// DB is the run store, for what is read or claimed outside a caller's
	// transaction (a step's cooldown, a group's thread at delivery).
	DB database.Querier
	// Tables are the typed statements for the store's dialect.
	Tables database.Tables
	Outbox Outbox
	Runs   Runs
	// Planner and Lookback plan an alert as its run will (runs.lookback).
	Planner  Planner
	Lookback time.Duration
	// Storm is notify.storm; the zero value means config.Default's.
	Storm config.Storm
	// ChannelLabel is the alert label that routes a thread to another
	// channel (notify.slack.channel_label); "" none.
	ChannelLabel string
	// Owner is this process's lease owner id: the slots a run holds are
	// held while it owns the run.
	Owner string
	Log   *zap.Logger
	// Registerer receives grouping's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Grouper is the run service's grouping, routing, cooldowns and slots.
type Grouper struct {
	db           database.Querier
	tables       database.Tables
	out          Outbox
	runs         Runs
	planner      Planner
	lookback     time.Duration
	storm        config.Storm
	channelLabel string
	owner        string
	log          *zap.Logger
	m            metrics
}

// New builds a Grouper and registers its metrics.
func New(d Deps) (*Grouper, error) {
	if d.DB == nil || d.Outbox == nil || d.Runs == nil || d.Planner == nil {
		return nil, fmt.Errorf("runner: grouping: a store, an outbox, the runs and a planner are required")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	g := &Grouper{db: d.DB, tables: d.Tables, out: d.Outbox, runs: d.Runs, planner: d.Planner, lookback: d.Lookback,
		storm: d.Storm, channelLabel: d.ChannelLabel, owner: d.Owner, log: d.Log, m: newMetrics()}
	if d.Registerer != nil {
		for _, c := range g.m.collectors() {
			if err := d.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("runner: register metrics: %w", err)
			}
		}
	}
	return g, nil
}

// metrics are grouping's counters.
type metrics struct {
	// cooldownRepeats counts alerts skipped inside a playbook's cooldown
	// (each said in the thread that holds the evidence), by playbook.
	cooldownRepeats *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		cooldownRepeats: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autocapture_cooldown_repeats_total",
			Help: "Skips of a playbook inside its cooldown, by playbook: each said in the thread of the run that holds the evidence (a resumed run that plans again counts again, and says nothing twice)."},
			[]string{"playbook"}),
	}
}

func (m metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.cooldownRepeats}
}

func toMS(t time.Time) int64 { return t.UnixMilli() }

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
