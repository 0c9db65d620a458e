package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// seenDays is how far back the seen-before line looks; seenLimit caps the
// earlier runs read per label (a count that reaches it says "at least").
const (
	seenDays  = 7
	seenLimit = 50
)

// seenBefore is how often r's alert fired before r on its instance and its
// model within seenDays; nil when never (or the alert has neither label).
func (s *Runs) seenBefore(ctx context.Context, q database.RowsQuerier, r *runRow) (*notify.SeenBefore, error) {
	inst, model := r.alert.Labels["instance"], r.alert.Labels["model_name"]
	if inst == "" && model == "" {
		return nil, nil
	}
	created := r.CreatedAt.UnixMilli()
	rows, err := s.tables.Seen.List(ctx, q, database.SeenFilter{Alertname: r.Alertname, Instance: inst, Model: model,
		Since: created - (seenDays * 24 * time.Hour).Milliseconds(), Before: created, Exclude: r.ID, Limit: seenLimit})
	if err != nil {
		return nil, fmt.Errorf("runner: seen before of run %s: %w", r.ID, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := &notify.SeenBefore{Days: seenDays, Instance: inst, Model: model, Capped: len(rows) == seenLimit}
	for _, row := range rows {
		e := notify.SeenRun{ID: row.ID, At: fromMS(row.CreatedAt), SameInstance: inst != "" && row.Instance == inst,
			SameModel: model != "" && row.Model == model}
		var v vocab.Verdict
		if row.Verdict != "" && json.Unmarshal([]byte(row.Verdict), &v) == nil {
			e.Verdict = v.ID
		}
		if e.SameInstance {
			out.OnInstance++
		}
		if e.SameModel {
			out.OnModel++
		}
		out.Earlier = append(out.Earlier, e)
	}
	return out, nil
}

// silenced says who silenced the run's alert from its thread, until when,
// while that silence holds; "" when none does.
func (s *Runs) silenced(ctx context.Context, q database.RowQuerier, runID string) (string, error) {
	a, ok, err := s.tables.Actions.BySlot(ctx, q, runID)
	if err != nil {
		return "", fmt.Errorf("runner: silence of run %s: %w", runID, err)
	}
	if !ok || a.State != database.ActionDone {
		return "", nil
	}
	who := a.UserID
	if a.UserName != "" {
		who = a.UserName + " (" + a.UserID + ")"
	}
	until := "until " + fromMS(a.EndsAt.Int64).Format("2006-01-02 15:04 MST")
	if a.Arg == "resolved" {
		until = "until the alert resolves"
	}
	return fmt.Sprintf("silenced in Alertmanager by %s %s (silence %s)", who, until, a.SilenceID.String), nil
}

// repeat is the earlier run of seen whose verdict v repeats (seen's rows:
// no query of its own), with its key artifact; nil when none.
func (s *Runs) repeat(ctx context.Context, q database.RowsQuerier, r *runRow, seen *notify.SeenBefore, v *vocab.Verdict) (*notify.Repeat, error) {
	if seen == nil || v == nil {
		return nil, nil
	}
	earlier, ok := seen.Repeated(v.ID)
	if !ok {
		return nil, nil
	}
	out := &notify.Repeat{Run: earlier, Before: r.CreatedAt.Sub(earlier.At)}
	records, err := s.tables.Steps.List(ctx, q, earlier.ID)
	if err != nil {
		return nil, fmt.Errorf("runner: evidence of run %s: %w", earlier.ID, err)
	}
	if a, ok := keyArtifact(records); ok {
		out.EvidenceName, out.EvidenceKey = a.Name, a.Key
	}
	return out, nil
}

// keyArtifact is the artifact that explains a run's verdict best: the report
// of the profile that refined it, else the first artifact of the step that
// reached it; false when neither kept one.
func keyArtifact(raw []string) (vocab.Artifact, bool) {
	var fallback *vocab.Artifact
	for _, b := range raw {
		var rec executor.StepRecord
		if json.Unmarshal([]byte(b), &rec) != nil || len(rec.Artifacts) == 0 {
			continue
		}
		if rec.Profile != nil {
			for _, a := range rec.Artifacts {
				if a.ContentType == "application/json" {
					return a, true
				}
			}
		}
		if rec.Verdict != nil && fallback == nil {
			fallback = &rec.Artifacts[0]
		}
	}
	if fallback == nil {
		return vocab.Artifact{}, false
	}
	return *fallback, true
}
