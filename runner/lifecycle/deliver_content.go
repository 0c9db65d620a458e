package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/outbox"
	"github.com/autocapture/autocapture/vocab"
)

// What a thread operation says is read from the run's state when it is
// delivered: the parent from the run row, a step's reply from its record, an
// update from the run's status, verdict and resolution as they are then. A
// delayed delivery therefore never shows something older than the store.

// runInfo is the parent message's content; channel is the playbook's
// notify.channel recorded with the operation ("" for the default).
func (s *Runs) runInfo(ctx context.Context, runID, channel string, retry bool) (notify.RunInfo, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return notify.RunInfo{}, err
	}
	info := parentInfo(r)
	info.Channel, info.Retry, info.Profilable = channel, retry, s.act != nil && s.profilable(r)
	if info.Seen, err = s.seenBefore(ctx, s.db, r); err != nil {
		return notify.RunInfo{}, err
	}
	if info.Silenced, err = s.silenced(ctx, s.db, runID); err != nil {
		return notify.RunInfo{}, err
	}
	info.Group, err = s.grp.ShownGroup(ctx, runID) // a group's lead opens the group's parent
	return info, err
}

// parentInfo is what a run's parent shows, from its row.
func parentInfo(r *runRow) notify.RunInfo {
	names := make([]string, len(r.plans))
	for i, p := range r.plans {
		names[i] = p.Playbook
	}
	return notify.RunInfo{ID: r.ID, Status: vocab.StatusRunning, Alert: r.alert, Playbooks: names, Resumed: r.Resumed}
}

// threadSource is the run lifecycle as the outbox reads it (outbox.Content).
type threadSource struct{ s *Runs }

var _ outbox.Content = threadSource{}

func (t threadSource) RunInfo(ctx context.Context, runID, channel string, retry bool) (notify.RunInfo, error) {
	return t.s.runInfo(ctx, runID, channel, retry)
}

func (t threadSource) StepReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error) {
	return t.s.stepReply(ctx, runID, key, plan, step, retry)
}

func (t threadSource) Summary(ctx context.Context, runID, key string, retry bool) (notify.Summary, error) {
	return t.s.summaryFor(ctx, runID, key, retry)
}

func (t threadSource) ChangeReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error) {
	return t.s.changeReply(ctx, runID, key, plan, step, retry)
}

func (t threadSource) UploadsReply(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	return t.s.art.UploadsReply(ctx, runID, key, retry)
}

func (t threadSource) MemberReport(ctx context.Context, runID, key string, retry bool) (notify.StepReport, error) {
	return t.s.grp.MemberReport(ctx, runID, key, retry)
}

func (t threadSource) ResumeClaimer(ctx context.Context, runID string) (string, error) {
	return t.s.resumeClaimer(ctx, runID)
}

// stepReply is a finished step's reply, from its record.
func (s *Runs) stepReply(ctx context.Context, runID, key, plan, step string, retry bool) (notify.StepReport, error) {
	raw, err := s.tables.Steps.Get(ctx, s.db, runID, plan, step)
	if err != nil {
		return notify.StepReport{}, fmt.Errorf("reply %s: read step: %w", key, err)
	}
	var rec executor.StepRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return notify.StepReport{}, fmt.Errorf("reply %s: decode step: %w", key, err)
	}
	rep := s.stepReport(ctx, runID, rec)
	rep.Key, rep.Retry = key, retry
	if rec.Verdict != nil {
		if rep.Repeat, err = s.repeatOf(ctx, runID, rec.Verdict); err != nil {
			return notify.StepReport{}, fmt.Errorf("reply %s: %w", key, err)
		}
	}
	return rep, nil
}

// repeatOf is the earlier run whose verdict v repeats, for a reply: its
// evidence's link made now, as the step's own are.
func (s *Runs) repeatOf(ctx context.Context, runID string, v *vocab.Verdict) (*notify.Repeat, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return nil, err
	}
	seen, err := s.seenBefore(ctx, s.db, r)
	if err != nil {
		return nil, err
	}
	rep, err := s.repeat(ctx, s.db, r, seen, v)
	if err != nil || rep == nil || rep.EvidenceKey == "" {
		return rep, err
	}
	if l, ok := s.art.Link(ctx, rep.Run.ID, vocab.Artifact{Name: rep.EvidenceName, Key: rep.EvidenceKey}); ok {
		rep.EvidenceLink = &l
	}
	return rep, nil
}

// resumeClaimer is the owner that claimed the resumed run, or outbox.NotYetError
// while no replica has: a resume's reply waits for it (within a lease, so a
// run no replica has room for does not hold its thread); "" once it waited
// a lease, or the run is done, without one.
func (s *Runs) resumeClaimer(ctx context.Context, runID string) (string, error) {
	owner, done, queuedFor, err := s.tables.Runs.QueueState(ctx, s.db, runID)
	if err != nil {
		return "", fmt.Errorf("read owner: %w", err)
	}
	if !owner.Valid && !done && time.Duration(queuedFor)*time.Millisecond < s.cfg.LeaseTimeout {
		return "", outbox.NotYetError{Wait: s.cfg.HeartbeatInterval}
	}
	return owner.String, nil
}

// stepReport is what a thread shows of a finished step, with links to its
// artifacts made at delivery (a link made when the step finished would age in
// the outbox; see artifacts' Keeper.Link) and its charts as files to attach.
func (s *Runs) stepReport(ctx context.Context, runID string, rec executor.StepRecord) notify.StepReport {
	rep := notify.StepReport{RunID: runID, Plan: rec.Plan, StepID: rec.ID, Kind: rec.Kind, Tier: rec.Tier, Status: rec.Status,
		Summary: rec.Summary, Reason: rec.Reason, Error: rec.Error, Duration: time.Duration(rec.DurationMS) * time.Millisecond,
		Verdict: rec.Verdict}
	for _, a := range rec.Artifacts {
		if a.Pending && s.art.Pending(ctx, a.Key) { // no link yet: the store does not hold it
			rep.Links = append(rep.Links, notify.Link{Name: a.Name, Pending: true})
		} else if l, ok := s.art.Link(ctx, runID, a); ok {
			rep.Links = append(rep.Links, l)
		}
		if strings.HasPrefix(a.ContentType, "image/") {
			rep.Files = append(rep.Files, notify.File{Name: a.Name, Key: a.Key, ContentType: a.ContentType, Size: a.Size})
		}
	}
	return rep
}

// summaryFor is an update's content: the run's state now.
func (s *Runs) summaryFor(ctx context.Context, runID, key string, retry bool) (notify.Summary, error) {
	r, err := s.getRow(ctx, s.db, runID)
	if err != nil {
		return notify.Summary{}, err
	}
	info := parentInfo(r)
	info.Profilable = s.act != nil && s.profilable(r)
	if info.Seen, err = s.seenBefore(ctx, s.db, r); err != nil { // the parent is re-rendered whole
		return notify.Summary{}, err
	}
	if info.Silenced, err = s.silenced(ctx, s.db, runID); err != nil {
		return notify.Summary{}, err
	}
	sum := notify.Summary{RunID: r.ID, Status: r.Status, Reason: r.Reason, Verdict: r.Verdict,
		ResolvedAt: r.ResolvedAt, Key: key, Retry: retry, Run: &info}
	if sum.Group, err = s.grp.ShownGroup(ctx, runID); err != nil {
		return notify.Summary{}, err
	}
	if r.FinishedAt != nil {
		from := r.CreatedAt
		if r.StartedAt != nil {
			from = *r.StartedAt
		}
		sum.Duration = r.FinishedAt.Sub(from)
	}
	return sum, nil
}
