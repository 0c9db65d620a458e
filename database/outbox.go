package database

import (
	"context"
	"fmt"
	"strings"
)

// Outbox is autocapture_outbox: the thread operations to deliver per run and
// sink, in seq order, one per op_key, with attempts, the last error and when
// each was delivered.
type Outbox struct{ d Dialect }

// OutboxOp is an undelivered operation.
type OutboxOp struct {
	Seq          int
	Op, Key, Ref string
	Attempts     int
}

// Add records an operation numbered seq for the run's thread on sink unless
// one with its seq or key is there.
func (o Outbox) Add(ctx context.Context, q Querier, runID, sink string, seq int, op, key, ref string) error {
	_, err := q.ExecContext(ctx, o.d.SQL(`INSERT INTO autocapture_outbox
				(run_id, sink, seq, op, op_key, ref, created_at) VALUES ($1, $2, $3, $4, $5, $6, {now})
				ON CONFLICT DO NOTHING`), runID, sink, seq, op, key, ref)
	return err
}

// Pending reads up to limit of the thread's undelivered operations, in order.
func (Outbox) Pending(ctx context.Context, q RowsQuerier, runID, sink string, limit int) ([]OutboxOp, error) {
	return readOps(ctx, q, runID, sink, `ORDER BY seq LIMIT $3`, limit)
}

// PendingOfKeys reads the thread's undelivered operations keyed k1 or k2, in
// order (lookups on the (run, sink, key) index).
func (Outbox) PendingOfKeys(ctx context.Context, q RowsQuerier, runID, sink, k1, k2 string) ([]OutboxOp, error) {
	return readOps(ctx, q, runID, sink, `AND op_key IN ($3, $4) ORDER BY seq`, k1, k2)
}

// readOps reads the thread's undelivered operations matching tail (which
// may use $3… for args).
func readOps(ctx context.Context, q RowsQuerier, runID, sink, tail string, args ...any) ([]OutboxOp, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, op, op_key, ref, attempts FROM autocapture_outbox
		WHERE run_id = $1 AND sink = $2 AND delivered_at IS NULL `+tail, append([]any{runID, sink}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ops []OutboxOp
	for rows.Next() {
		var o OutboxOp
		if err := rows.Scan(&o.Seq, &o.Op, &o.Key, &o.Ref, &o.Attempts); err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	return ops, rows.Err()
}

// Attempt counts an attempt at operation seq.
func (o Outbox) Attempt(ctx context.Context, q Querier, runID, sink string, seq int) error {
	_, err := q.ExecContext(ctx, o.d.SQL(`UPDATE autocapture_outbox SET attempts = attempts + 1
		WHERE run_id = $1 AND sink = $2 AND seq = $3`), runID, sink, seq)
	return err
}

// Failed keeps why operation seq failed.
func (Outbox) Failed(ctx context.Context, q Querier, runID, sink string, seq int, lastError string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_outbox SET last_error = $1 WHERE run_id = $2 AND sink = $3 AND seq = $4`,
		lastError, runID, sink, seq)
	return err
}

// MarkDelivered records operation seq delivered.
func (o Outbox) MarkDelivered(ctx context.Context, q Querier, runID, sink string, seq int) error {
	_, err := q.ExecContext(ctx, o.d.SQL(`UPDATE autocapture_outbox SET delivered_at = {now}, last_error = ''
		WHERE run_id = $1 AND sink = $2 AND seq = $3`), runID, sink, seq)
	return err
}

// MarkCoalesced records operations seqs delivered (edits left to a later
// one), in one statement.
func (o Outbox) MarkCoalesced(ctx context.Context, q Querier, runID, sink string, seqs []int) error {
	args := []any{runID, sink}
	marks := make([]string, len(seqs))
	for i, seq := range seqs {
		args = append(args, seq)
		marks[i] = fmt.Sprintf("$%d", len(args))
	}
	_, err := q.ExecContext(ctx, o.d.SQL(`UPDATE autocapture_outbox
		SET delivered_at = {now}, last_error = '' WHERE run_id = $1 AND sink = $2 AND seq IN (`+strings.Join(marks, ", ")+`)`),
		args...)
	return err
}

// Waiting lists up to 100 threads with operations waiting and nobody
// delivering them: a lapsed delivery lease, or none taken and the
// operation older than afterMS.
func (o Outbox) Waiting(ctx context.Context, q RowsQuerier, afterMS int64) ([]ThreadRef, error) {
	rows, err := q.QueryContext(ctx, o.d.SQL(`SELECT DISTINCT o.run_id, o.sink FROM autocapture_outbox o
		JOIN autocapture_threads t ON t.run_id = o.run_id AND t.sink = o.sink
		WHERE o.delivered_at IS NULL
		AND (t.pump_until < {now} OR (t.pump_until IS NULL AND o.created_at < {now} - $1)) LIMIT 100`), afterMS)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ThreadRef
	for rows.Next() {
		var t ThreadRef
		if err := rows.Scan(&t.RunID, &t.Sink); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// SinkBacklog is one sink's undelivered operations: how many, and how long
// the oldest has waited (ms, on the database's clock).
type SinkBacklog struct {
	Sink     string
	Pending  int
	WaitedMS int64
}

// Backlog counts the undelivered operations by sink.
func (o Outbox) Backlog(ctx context.Context, q RowsQuerier) ([]SinkBacklog, error) {
	rows, err := q.QueryContext(ctx, o.d.SQL(`SELECT sink, COUNT(*), {now} - MIN(created_at)
		FROM autocapture_outbox WHERE delivered_at IS NULL GROUP BY sink`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SinkBacklog
	for rows.Next() {
		var b SinkBacklog
		if err := rows.Scan(&b.Sink, &b.Pending, &b.WaitedMS); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// AppendRef appends suffix to the ref of the run's undelivered operation
// key when its ref ends in sep (the reaper's resume reply, whose ref ends in
// the separator of an owner not known yet).
func (Outbox) AppendRef(ctx context.Context, q Querier, runID, key, suffix, sep string) error {
	_, err := q.ExecContext(ctx, `UPDATE autocapture_outbox SET ref = ref || $1
		WHERE run_id = $2 AND op_key = $3 AND delivered_at IS NULL AND substr(ref, length(ref)) = $4`,
		suffix, runID, key, sep)
	return err
}
