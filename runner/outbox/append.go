package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/riverqueue/river"
)

// The outbox: every thread operation (post the parent, reply for a step, edit
// the parent) is a row written in the SAME transaction as the state change it
// reports — the plans stored, a step persisted, the run finished, the alert
// resolved — and a delivery job inserted with it. A kill -9 before that commit
// leaves neither the state nor the operation; after it, both, and a deliverer
// on any replica sends it (deliver.go). The runner never waits for a notifier.
//
// Rows are numbered per run (autocapture_runs.outbox_seq, incremented under the
// run row's lock), delivered in that order per sink by one deliverer at a time
// (a lease on autocapture_threads), and unique per (run, sink, key), so
// recording the same operation twice (a resumed step, a repeated resolution)
// is a no-op. What an operation is, its row and its content: ops.go.

// Append writes ops in tx, numbered after the run's last, with one
// delivery job per sink. A thread's parent (Open) is recorded for every
// configured sink, which opens the run's thread there; any other operation
// goes to the sinks whose thread is open, so a run without a thread (skipped
// or cancelled before its plans were stored, or no sink configured) records
// nothing, and a sink added mid-run never gets half a thread.
func (s *Outbox) Append(ctx context.Context, tx *sql.Tx, runID string, ops ...Op) error {
	to, ops, grouped, err := s.routeOps(ctx, tx, runID, ops) // a group's member records into its lead's thread
	if err != nil || len(ops) == 0 {
		return err
	}
	return s.writeOps(ctx, tx, to, grouped, ops...)
}

// AppendGroup records ops in the thread of the group lead leads (its
// parent, a member joining a fleet), in tx.
func (s *Outbox) AppendGroup(ctx context.Context, tx *sql.Tx, lead string, ops ...Op) error {
	return s.writeOps(ctx, tx, lead, true, ops...)
}

// writeOps records ops in runID's outbox; grouped: the run leads a group,
// whose row numbers its thread's operations.
func (s *Outbox) writeOps(ctx context.Context, tx *sql.Tx, runID string, grouped bool, ops ...Op) error {
	if len(ops) == 0 {
		return nil
	}
	sinks, err := s.threadSinks(ctx, tx, runID, isOpen(ops[0]))
	if err != nil || len(sinks) == 0 {
		return err
	}
	number := s.tables.Runs.NextOutboxSeq
	if grouped {
		number = s.tables.Groups.NextOutboxSeq
	}
	for _, o := range ops {
		seq, err := number(ctx, tx, runID)
		if err != nil {
			return fmt.Errorf("runner: outbox of %s: number %s: %w", runID, o.Key(), err)
		}
		for _, sink := range sinks {
			if err := s.tables.Outbox.Add(ctx, tx, runID, sink, seq, string(o.kind()), o.Key(), o.ref()); err != nil {
				return fmt.Errorf("runner: outbox of %s: record %s: %w", runID, o.Key(), err)
			}
		}
	}
	jobs := make([]river.InsertManyParams, len(sinks))
	for i, sink := range sinks {
		jobs[i] = river.InsertManyParams{Args: Args{RunID: runID, Sink: sink}}
	}
	if _, err := s.client().InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("runner: outbox of %s: enqueue delivery: %w", runID, err)
	}
	return nil
}

// isOpen says whether o opens its thread.
func isOpen(o Op) bool {
	_, ok := o.(Open)
	return ok
}

// threadSinks returns the sinks an operation of the run goes to: with open,
// every configured sink, whose threads it opens (autocapture_threads rows);
// else the sinks whose thread is open.
func (s *Outbox) threadSinks(ctx context.Context, tx *sql.Tx, runID string, open bool) ([]string, error) {
	if open {
		for _, sink := range s.sinkOrder {
			if err := s.tables.Threads.Open(ctx, tx, runID, sink); err != nil {
				return nil, fmt.Errorf("runner: outbox of %s: open thread: %w", runID, err)
			}
		}
		return s.sinkOrder, nil
	}
	sinks, err := s.tables.Threads.Sinks(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("runner: outbox of %s: threads: %w", runID, err)
	}
	return sinks, nil
}

// Claimed completes, in tx, the reaper's Resumed reply of the run's n-th
// resume (recorded with From, its ref ending in the separator of an owner
// not known yet) with owner, the process that claimed the run, while it is
// undelivered.
func (s *Outbox) Claimed(ctx context.Context, tx *sql.Tx, runID string, n int, owner string) error {
	return s.tables.Outbox.AppendRef(ctx, tx, runID, resumedKey(n), owner, refSep)
}
