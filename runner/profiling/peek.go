package profiling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/autocapture/autocapture/vocab"
)

// Peek says whether a capture of req.Target would be refused now, and by
// which guard (the lease, the pause, the budget, the cooldown), in the words
// Acquire would use; nil when it would start. It takes and writes nothing:
// Acquire, when the step runs, still decides.
func (pl *Plane) Peek(ctx context.Context, req vocab.LeaseRequest) (*vocab.ProfileRefusal, error) {
	req.Target = normTarget(req.Target)
	tx, err := pl.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("runner: profile guard %s: %w", req.Target, err)
	}
	defer tx.Rollback() // read only
	now, err := pl.dbNow(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("runner: profile guard %s: clock: %w", req.Target, err)
	}
	cur, err := leaseOf(pl.tables.ProfileLeases.Get(ctx, tx, req.Target))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("runner: profile guard %s: %w", req.Target, err)
	case !cur.takeable(now):
		return &vocab.ProfileRefusal{Reason: vocab.RefusedBusy, Detail: cur.busyDetail()}, nil
	}
	return pl.profileBudget(ctx, tx, req, now)
}
