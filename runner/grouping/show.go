package grouping

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/runs"
)

// What a group's thread shows is read at delivery, like a run's: the members'
// rows as they are then, so an edit that comes late shows the latest lines.

// groupOf reads the group lead leads (nil: none), its members in the order
// they joined.
func (g *Grouper) groupOf(ctx context.Context, lead string) (*notify.Group, error) {
	kind, err := g.tables.Groups.Kind(ctx, g.db, lead)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read group of %s: %w", lead, err)
	}
	members, err := g.runs.GroupRuns(ctx, lead)
	if err != nil {
		return nil, fmt.Errorf("read group of %s: %w", lead, err)
	}
	grp := &notify.Group{Kind: kind, LeadID: lead}
	for _, r := range members {
		m := memberOf(r)
		if r.ID == lead || grp.Alert == "" {
			grp.Alert, grp.Model = m.Alert, m.Model
		}
		grp.Members = append(grp.Members, m)
	}
	return grp, nil
}

// ShownGroup is the group a lead's parent shows (nil: none): a storm always,
// a fleet once it has more than its lead.
func (g *Grouper) ShownGroup(ctx context.Context, lead string) (*notify.Group, error) {
	grp, err := g.groupOf(ctx, lead)
	if err != nil || grp == nil || (grp.Kind == notify.GroupFleet && len(grp.Members) < 2) {
		return nil, err
	}
	return grp, nil
}

// memberOf is a run's line in its group's parent.
func memberOf(r *runs.Run) notify.Member {
	l := r.Labels
	m := notify.Member{RunID: r.ID, Alert: l["alertname"], Instance: l["instance"], Model: l["model_name"],
		Status: r.Status, Resolved: r.ResolvedAt != nil}
	if r.Verdict != nil {
		m.Verdict = r.Verdict.ID
	}
	return m
}

// MemberReport is a member's compact reply (outbox.MemberReply's content):
// its outcome and its steps.
func (g *Grouper) MemberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	r, err := g.runs.Run(ctx, runID)
	if err != nil {
		return notify.StepReport{}, err
	}
	m := memberOf(r)
	mr := &notify.MemberReport{Member: m, Reason: r.Reason, Verdict: r.Verdict}
	if r.FinishedAt != nil {
		from := r.CreatedAt
		if r.StartedAt != nil {
			from = *r.StartedAt
		}
		mr.Duration = r.FinishedAt.Sub(from)
	}
	for _, rec := range r.Steps {
		mr.Steps = append(mr.Steps, notify.StepReport{RunID: runID, Plan: rec.Plan, StepID: rec.ID, Kind: rec.Kind,
			Tier: rec.Tier, Status: rec.Status, Summary: rec.Summary, Reason: rec.Reason, Error: rec.Error,
			Duration: time.Duration(rec.DurationMS) * time.Millisecond, Verdict: rec.Verdict})
	}
	// Summary is the reply in one line for a notifier that ignores Member.
	line := []string{m.Instance, string(r.Status)}
	if m.Verdict != "" {
		line = append(line, m.Verdict)
	}
	return notify.StepReport{RunID: runID, StepID: "run", Kind: "run", Status: r.Status, Reason: r.Reason, Key: key,
		Retry: retry, Duration: mr.Duration, Summary: strings.Join(line, " · "), Member: mr}, nil
}
