package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/notify"
)

// What a group's thread shows is read at delivery, like a run's: the members'
// rows as they are then, so an edit that comes late shows the latest lines.

// groupOf reads the group lead leads (nil: none), its members in the order
// they joined.
func (s *Service) groupOf(ctx context.Context, lead string) (*notify.Group, error) {
	kind, err := s.tables.Groups.Kind(ctx, s.db, lead)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read group of %s: %w", lead, err)
	}
	rows, err := s.tables.Runs.GroupMembers(ctx, s.db, lead)
	if err != nil {
		return nil, fmt.Errorf("read group of %s: %w", lead, err)
	}
	g := &notify.Group{Kind: kind, LeadID: lead}
	for _, raw := range rows {
		r, err := decodeRun(raw)
		if err != nil {
			return nil, fmt.Errorf("read group of %s: %w", lead, err)
		}
		m := memberOf(r)
		if r.ID == lead || g.Alert == "" {
			g.Alert, g.Model = m.Alert, m.Model
		}
		g.Members = append(g.Members, m)
	}
	return g, nil
}

// shownGroup is the group a lead's parent shows: a storm always, a fleet once
// it has more than its lead.
func (s *Service) shownGroup(ctx context.Context, lead string) (*notify.Group, error) {
	g, err := s.groupOf(ctx, lead)
	if err != nil || g == nil || (g.Kind == notify.GroupFleet && len(g.Members) < 2) {
		return nil, err
	}
	return g, nil
}

// memberOf is a run's line in its group's parent.
func memberOf(r *runRow) notify.Member {
	l := r.alert.Labels
	m := notify.Member{RunID: r.ID, Alert: l["alertname"], Instance: l["instance"], Model: l["model_name"],
		Status: r.Status, Resolved: r.ResolvedAt != nil}
	if r.Verdict != nil {
		m.Verdict = r.Verdict.ID
	}
	return m
}

// memberReport is a member's compact reply: its outcome and its steps.
func (s *Service) memberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return notify.StepReport{}, err
	}
	recs, err := s.loadSteps(ctx, s.db, runID)
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
	for _, rec := range recs {
		mr.Steps = append(mr.Steps, notify.StepReport{RunID: runID, Plan: rec.Plan, StepID: rec.ID, Kind: rec.Kind,
			Tier: rec.Tier, Status: rec.Status, Summary: rec.Summary, Reason: rec.Reason, Error: rec.Error,
			Duration: time.Duration(rec.DurationMS) * time.Millisecond, Verdict: rec.Verdict})
	}
	// Summary is the reply in one line for a notifier that ignores Member.
	line := []string{m.Instance, r.Status}
	if m.Verdict != "" {
		line = append(line, m.Verdict)
	}
	return notify.StepReport{RunID: runID, StepID: "run", Kind: "run", Status: r.Status, Reason: r.Reason, Key: key,
		Retry: retry, Duration: mr.Duration, Summary: strings.Join(line, " · "), Member: mr}, nil
}
