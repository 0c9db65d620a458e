package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/autocapture/autocapture/notify"
)

// routeOps says where a run's operations are recorded: its own outbox, or —
// for a member of a group — its lead's, rewritten by memberOps. grouped: the
// outbox is a group lead's (numbered by the group's row).
func (s *Outbox) routeOps(ctx context.Context, tx *sql.Tx, runID string, ops []Op) (to string, out []Op, grouped bool, err error) {
	if len(ops) == 0 {
		return runID, nil, false, nil
	}
	lead, kind, err := s.tables.Groups.Of(ctx, tx, runID)
	if err == sql.ErrNoRows {
		return runID, ops, false, nil
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("runner: outbox of %s: group: %w", runID, err)
	}
	switch {
	case !lead.Valid || !kind.Valid: // no group, or its lead is gone
		return runID, ops, false, nil
	case lead.String == runID && kind.String == notify.GroupFleet:
		return runID, ops, true, nil // a fleet's lead keeps its thread
	}
	return lead.String, memberOps(runID, ops), true, nil
}

// memberOps is what a group member's operations become in the group's
// thread: no parent and no reply per step (nor "resumed"); its verdict and
// resolution edit the group parent; its end posts its one compact reply,
// then edits the parent (the edit last, so coalescing edits never drops the
// one after the final reply).
func memberOps(runID string, ops []Op) []Op {
	var out []Op
	for _, o := range ops {
		switch o := o.(type) {
		case VerdictEdit:
			change := MemberVerdict
			switch {
			case o.Profiled != "":
				change = MemberProfiled
			case o.Preliminary:
				change = MemberPreliminary
			}
			out = append(out, GroupEdit{Member: runID, Change: change})
		case Finished:
			out = append(out, MemberReply{Member: runID}, GroupEdit{Member: runID, Change: MemberEnded})
		case Resolved:
			out = append(out, GroupEdit{Member: runID, Change: MemberResolved})
		default: // the parent, a step's reply, "resumed", …
		}
	}
	return out
}

// AppendResolved records the resolutions one Accept made, after every run
// row it locks is locked: a group's counter row is taken last, in lead
// order, as every other transaction recording into a group does (a step,
// an end: the run's row, then the group's), so a webhook resolving many
// members of a storm never holds the group's row while waiting for a
// member's that a finishing member holds the other way round.
func (s *Outbox) AppendResolved(ctx context.Context, tx *sql.Tx, ids []string) error {
	type rec struct {
		to      string
		ops     []Op
		grouped bool
	}
	recs := make([]rec, 0, len(ids))
	for _, id := range ids {
		to, ops, grouped, err := s.routeOps(ctx, tx, id, []Op{Resolved{}})
		if err != nil {
			return err
		}
		recs = append(recs, rec{to, ops, grouped})
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].to < recs[j].to })
	for _, r := range recs {
		if err := s.writeOps(ctx, tx, r.to, r.grouped, r.ops...); err != nil {
			return err
		}
	}
	return nil
}
