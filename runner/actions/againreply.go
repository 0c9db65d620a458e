package actions

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/autocapture/autocapture/database"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/notify"
	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/vocab"
)

// maxKernel bounds a kernel's name in a reply (names are the traced
// program's: untrusted, and some run to kilobytes of template arguments).
const maxKernel = 160

// againReply is the thread's reply for a "Profile again", read at delivery:
// why nothing was taken, or the new capture compared with the first and
// with the baseline, per family, with the top kernel, the GPU's idle share
// and links to both runs and both reports.
func (a *Actions) againReply(ctx context.Context, rep notify.StepReport, row database.ActionRow) (notify.StepReport, error) {
	lead := fmt.Sprintf("%s asked to profile %s again", who(row), row.Arg)
	if row.State != database.ActionDone {
		rep.Notice = lead + ": not profiled — " + row.Detail + ". Nothing was started; click Profile again once it frees."
		return rep, nil
	}
	againID, err := a.d.Tables.Runs.ByKey(ctx, a.db(), AgainKey(row.ID))
	if errors.Is(err, sql.ErrNoRows) { // retention removed it before its reply went out
		rep.Notice = lead + ": its run is no longer kept."
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("actions: reply for %s: its run: %w", row.ID, err)
	}
	run, err := a.d.Tables.Runs.Get(ctx, a.db(), againID)
	if err != nil {
		return rep, fmt.Errorf("actions: reply for %s: run %s: %w", row.ID, againID, err)
	}
	now, err := a.profileRecord(ctx, againID)
	if err != nil {
		return rep, err
	}
	rep.Links = a.runLinks(againID, row.RunID)
	switch {
	case now == nil:
		rep.Notice = fmt.Sprintf("%s: run %s ended %s without a capture%s.", lead, againID, run.Status, reasonOf(run.Reason))
		return rep, nil
	case now.Status == vocab.StatusSkipped && now.Findings["refused"] != nil:
		reason, detail, _ := strings.Cut(now.Reason, ": ")
		rep.Notice = lead + ": not profiled — " + RefusalWords(&vocab.ProfileRefusal{Reason: reason, Detail: detail}) +
			". Click Profile again once it frees."
		return rep, nil
	case now.Profile == nil:
		rep.Notice = fmt.Sprintf("%s: the capture %s%s.", lead, now.Status, reasonOf(firstOf(now.Summary, now.Error, now.Reason)))
		return rep, nil
	}
	first, err := a.profileRecord(ctx, row.RunID)
	if err != nil {
		return rep, err
	}
	var was *vocab.ProfileFinding
	if first != nil {
		was = first.Profile
	}
	if was == nil {
		was = a.verdictFinding(ctx, row.RunID)
	}
	rep.Notice = lead + ": " + headline(now.Profile, was)
	rep.Summary = compare(now.Profile, was)
	rep.Links = append(rep.Links, a.reportLinks(ctx, againID, now, "Report now")...)
	if first != nil {
		rep.Links = append(rep.Links, a.reportLinks(ctx, row.RunID, first, "Report first")...)
	}
	return rep, nil
}

// profileRecord is run runID's profile step's record (the last that found
// something, else the last); nil when it has none.
func (a *Actions) profileRecord(ctx context.Context, runID string) (*executor.StepRecord, error) {
	raws, err := a.d.Tables.Steps.List(ctx, a.db(), runID)
	if err != nil {
		return nil, fmt.Errorf("actions: steps of run %s: %w", runID, err)
	}
	var found *executor.StepRecord
	for _, raw := range raws {
		var rec executor.StepRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("actions: steps of run %s: %w", runID, err)
		}
		if rec.Kind == "profile" && (found == nil || found.Profile == nil || rec.Profile != nil) {
			found = &rec
		}
	}
	return found, nil
}

// verdictFinding is the profile finding the run's verdict carries, nil when
// none (or the run cannot be read: the reply goes without the first).
func (a *Actions) verdictFinding(ctx context.Context, runID string) *vocab.ProfileFinding {
	r, err := a.d.Tables.Runs.Get(ctx, a.db(), runID)
	if err != nil || !r.Verdict.Valid {
		return nil
	}
	var v vocab.Verdict
	if json.Unmarshal([]byte(r.Verdict.String), &v) != nil {
		return nil
	}
	return v.Profile
}

// headline is the reply's line: the leading family now, in the first
// capture and in the baseline.
func headline(now, was *vocab.ProfileFinding) string {
	s := fmt.Sprintf("%s %s of GPU time now", vocab.FamilyWords(now.Family), pct(now.Share))
	if was != nil {
		s += fmt.Sprintf(", %s in the first capture", pct(was.Shares[now.Family]))
	} else {
		s += " (the first capture has no profile to compare)"
	}
	if base, _, ok := baseline(now, was); ok {
		s += fmt.Sprintf(", %s in the baseline", pct(base[now.Family]))
	}
	return s + "."
}

// compare is every family's share now, in the first capture and in the
// baseline, then the GPU's idle share and the top kernels.
func compare(now, was *vocab.ProfileFinding) string {
	base, ref, hasBase := baseline(now, was)
	fams := make([]string, 0, len(now.Shares))
	for f := range now.Shares {
		fams = append(fams, f)
	}
	slices.SortFunc(fams, func(x, y string) int { return cmp.Or(cmp.Compare(now.Shares[y], now.Shares[x]), cmp.Compare(x, y)) })
	var lines []string
	for _, f := range fams {
		l := vocab.FamilyWords(f) + ": " + pct(now.Shares[f]) + " now"
		if was != nil {
			l += " · " + pct(was.Shares[f]) + " first"
		}
		if hasBase {
			l += " · " + pct(base[f]) + " baseline"
		}
		lines = append(lines, l)
	}
	idle := "GPU idle: " + pct(now.IdleShare) + " now"
	if was != nil {
		idle += " · " + pct(was.IdleShare) + " first"
	}
	lines = append(lines, idle)
	top := "top kernel now: " + kernel(now)
	if was != nil {
		top += " · first: " + kernel(was)
	}
	lines = append(lines, top)
	if hasBase {
		lines = append(lines, fmt.Sprintf("baseline: run %s, taken %s", ref.RunID, ref.TakenAt.UTC().Format("2006-01-02 15:04 MST")))
	} else {
		lines = append(lines, "no healthy baseline kept to compare (set one with `baseline: true` on a profile step run while the server is healthy)")
	}
	return strings.Join(lines, "\n")
}

// baseline is every family's share in the healthy baseline a capture was
// compared with (the new one's, else the first's): a family the comparison
// did not list moved by under half a point, so its share is the capture's.
func baseline(now, was *vocab.ProfileFinding) (map[string]float64, *vocab.BaselineRef, bool) {
	for _, f := range []*vocab.ProfileFinding{now, was} {
		if f == nil || !f.HasBaseline || f.Baseline == nil || !f.Baseline.Baseline {
			continue
		}
		out := make(map[string]float64, len(f.Shares))
		for fam, s := range f.Shares {
			out[fam] = s
		}
		for _, d := range f.Shift {
			out[d.Family] = d.Baseline
		}
		return out, f.Baseline, true
	}
	return nil, nil, false
}

func kernel(f *vocab.ProfileFinding) string {
	if f.TopKernel == "" {
		return "none"
	}
	return untrusted.ClipTo(f.TopKernel, maxKernel) + " " + pct(f.TopKernelShare)
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

// runLinks are the run pages of the new capture and of the first; none
// without web.external_url (a page's path alone links nowhere in Slack).
func (a *Actions) runLinks(againID, firstID string) []notify.Link {
	if a.d.RunURL == nil || !strings.HasPrefix(a.d.RunURL(firstID), "http") {
		return nil
	}
	return []notify.Link{{Name: "Run now", URL: a.d.RunURL(againID)}, {Name: "Run first", URL: a.d.RunURL(firstID)}}
}

// reportLinks link rec's profile report, named name; none when it was not
// stored or no links are configured.
func (a *Actions) reportLinks(ctx context.Context, runID string, rec *executor.StepRecord, name string) []notify.Link {
	if a.d.ReportLink == nil || rec.Profile == nil || rec.Profile.Report == "" {
		return nil
	}
	for _, art := range rec.Artifacts {
		if art.Key != rec.Profile.Report {
			continue
		}
		if l, ok := a.d.ReportLink(ctx, runID, art); ok {
			l.Name = name
			return []notify.Link{l}
		}
	}
	return nil
}

func reasonOf(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
