package runner

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/riverqueue/river"

	"github.com/autocapture/autocapture/notify"
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
// is a no-op.

// opKind is what a thread operation does.
type opKind string

const (
	// opOpen posts the thread's parent message.
	opOpen opKind = "open"
	// opReply posts a reply: a finished step, or the run resumed.
	opReply opKind = "reply"
	// opUpdate edits the parent with the run's state as it is at delivery
	// (verdict, outcome, resolution) and, for the end and the resolution, says
	// so in a reply.
	opUpdate opKind = "update"
)

// op is one thread operation to record. ref says where its content is read
// from at delivery: the content is the run's state then (Slack is a projection
// of the run row), never a copy that could go stale (an expiring link).
type op struct {
	kind opKind
	key  string
	ref  string
}

// Operation keys. A key is the operation's identity in its thread: recording
// it again does nothing, and a notifier retrying it finds what it posted.
func stepKey(plan, step string) string { return "step/" + plan + "/" + step }

const (
	keyOpen     = notify.KeyOpen
	keyVerdict  = notify.KeyCloseVerdict
	keyFinished = notify.KeyCloseFinished
	keyResolved = notify.KeyCloseResolved
)

func resumedKey(n int) string { return fmt.Sprintf("run/resumed/%d", n) }

// resumedRef is the ref of a resume's reply: the resume's number, the owner
// the run was taken from ("" when none held it) and the one that took it.
// A ref of the older form, "resumed:N", names neither.
func resumedRef(n int, from, on string) string {
	return fmt.Sprintf("%s%d\x1f%s\x1f%s", resumedRefPrefix, n, from, on)
}

const resumedRefPrefix = "resumed:"

// splitResumedRef reads a resumedRef.
func splitResumedRef(ref string) (n int, from, on string, ok bool) {
	rest, ok := strings.CutPrefix(ref, resumedRefPrefix)
	if !ok {
		return 0, "", "", false
	}
	num, rest, _ := strings.Cut(rest, "\x1f")
	from, on, _ = strings.Cut(rest, "\x1f")
	n, _ = strconv.Atoi(num)
	return n, from, on, true
}

// stepRef is the ref of a step's reply: its plan and id in autocapture_steps.
func stepRef(plan, step string) string { return plan + "\x1f" + step }

func splitStepRef(ref string) (plan, step string, ok bool) { return strings.Cut(ref, "\x1f") }

// recordOps writes ops in tx, numbered after the run's last, with one
// delivery job per sink. A thread's parent (opOpen) is recorded for every
// configured sink, which opens the run's thread there; any other operation
// goes to the sinks whose thread is open, so a run without a thread (skipped
// or cancelled before its plans were stored, or no sink configured) records
// nothing, and a sink added mid-run never gets half a thread.
func (s *Service) recordOps(ctx context.Context, tx *sql.Tx, runID string, ops ...op) error {
	to, ops, grouped, err := s.routeOps(ctx, tx, runID, ops) // a group's member records into its lead's thread
	if err != nil || len(ops) == 0 {
		return err
	}
	return s.writeOps(ctx, tx, to, grouped, ops...)
}

// writeOps records ops in runID's outbox; grouped: the run leads a group,
// whose row numbers its thread's operations.
func (s *Service) writeOps(ctx context.Context, tx *sql.Tx, runID string, grouped bool, ops ...op) error {
	if len(ops) == 0 {
		return nil
	}
	sinks, err := s.threadSinks(ctx, tx, runID, ops[0].kind == opOpen)
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
			return fmt.Errorf("runner: outbox of %s: number %s: %w", runID, o.key, err)
		}
		for _, sink := range sinks {
			if err := s.tables.Outbox.Add(ctx, tx, runID, sink, seq, string(o.kind), o.key, o.ref); err != nil {
				return fmt.Errorf("runner: outbox of %s: record %s: %w", runID, o.key, err)
			}
		}
	}
	jobs := make([]river.InsertManyParams, len(sinks))
	for i, sink := range sinks {
		jobs[i] = river.InsertManyParams{Args: notifyArgs{RunID: runID, Sink: sink}}
	}
	if _, err := s.client.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("runner: outbox of %s: enqueue delivery: %w", runID, err)
	}
	return nil
}

// threadSinks returns the sinks an operation of the run goes to: with open,
// every configured sink, whose threads it opens (autocapture_threads rows);
// else the sinks whose thread is open.
func (s *Service) threadSinks(ctx context.Context, tx *sql.Tx, runID string, open bool) ([]string, error) {
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
