package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/capture/internal/stepkit"
	"github.com/autocapture/autocapture/internal/bytesize"
	"github.com/autocapture/autocapture/torchtrace"
	"github.com/autocapture/autocapture/vocab"
)

// profileReportName is the report artifact, beside the stored files.
const profileReportName = "profile-report.json"

// profileTopKernels is how many kernels the findings list.
const profileTopKernels = 5

// Report is what a capture says, stored as profile-report.json: the
// window, the files, the merged analysis and the comparison with a baseline.
type Report struct {
	Target string            `json:"target"`
	RunID  string            `json:"run_id"`
	Key    string            `json:"key"`
	Window torchtrace.Window `json:"window"`
	// CutShort says why the frame ended before its duration ("" when it ran whole).
	CutShort string `json:"cut_short,omitempty"`
	// Recovered says how a resumed attempt got an earlier attempt's frame
	// back (the sweeper stopped it after that attempt's daemon died).
	Recovered   string             `json:"recovered,omitempty"`
	StopSeconds float64            `json:"stop_seconds"`
	Files       []collected        `json:"files"`
	Bytes       int64              `json:"bytes"`
	Analysis    *torchtrace.Report `json:"analysis,omitempty"`
	Baseline    *vocab.BaselineRef `json:"baseline,omitempty"`
	Deltas      []torchtrace.Delta `json:"deltas,omitempty"`
	// Cost is what the capture cost the instance's live traffic.
	Cost    *Cost  `json:"cost,omitempty"`
	Summary string `json:"summary"`
}

// reportKey is what captures are compared by: the model, else the target.
func reportKey(in *vocab.Input, target string) string {
	if m := in.Alert.Labels["model_name"]; m != "" {
		return m
	}
	return target
}

// report merges the traces' analyses, compares them with the kept baseline,
// keeps this one for later comparisons (when it is whole), stores
// profile-report.json and fills res.
func (p *Profile) report(ctx context.Context, in *vocab.Input, res *vocab.Result, fr *frameRun, files []collected) {
	rep := Report{Target: fr.target, RunID: in.RunID, Key: reportKey(in, fr.target), Window: fr.window,
		CutShort: fr.cut, Recovered: fr.recovered, StopSeconds: fr.stopTook.Seconds(), Files: files, Cost: fr.costResult}
	if c := fr.costResult; c != nil {
		res.Findings["cost"] = jsonValue(c)
		res.Findings["stall_seconds"] = c.StallSeconds
	}
	var reports []*torchtrace.Report
	var names []string
	var notRead []string
	for _, f := range files {
		rep.Bytes += f.Bytes
		if f.Artifact != nil {
			res.Artifacts = append(res.Artifacts, *f.Artifact)
			names = append(names, f.Name)
		}
		if f.Report != nil {
			reports = append(reports, f.Report)
		} else if f.Analysis != "" {
			notRead = append(notRead, f.Name+": "+f.Analysis)
		}
	}
	res.Findings["files"] = names
	res.Findings["bytes"] = rep.Bytes
	if len(notRead) > 0 {
		res.Findings["not_analysed"] = notRead
	}
	switch len(reports) {
	case 0:
	case 1:
		rep.Analysis = reports[0]
	default:
		rep.Analysis = torchtrace.Merge(reports...)
	}
	if rep.Analysis != nil {
		p.compare(ctx, in, &rep)
		analysisFindings(res.Findings, &rep)
		rep.Summary = torchtrace.Summary(rep.Analysis, rep.Deltas)
	}
	if rep.Summary == "" {
		rep.Summary = fmt.Sprintf("%d files, %s", len(names), bytesize.Format(rep.Bytes))
		if len(notRead) > 0 {
			rep.Summary += fmt.Sprintf(" (%d not analysed)", len(notRead))
		}
	}
	stored := ""
	if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
		if art, err := stepkit.PutArtifact(ctx, in, profileReportName, "application/json", bytes.NewReader(b)); err == nil {
			res.Artifacts = append(res.Artifacts, art)
			stored = art.Key
		} else {
			stepkit.Logger(in).Warn("The profile report could not be stored.", zap.Error(err))
		}
	}
	res.Profile = finding(in, &rep, stored)
	res.Summary = fmt.Sprintf("profile %s %s: %s", httpTarget(fr.target), fr.window.End.Sub(fr.window.Start).Round(time.Millisecond), rep.Summary)
	if c := fr.costResult; c != nil && c.Summary != "" {
		res.Summary += " · " + c.Summary
	}
	if fr.cut != "" {
		res.Summary += " (cut short: " + fr.cut + ")"
	}
	if fr.recovered != "" {
		res.Summary += " (" + fr.recovered + ")"
	}
}

// compare looks up the baseline (before keeping this capture, so a capture
// is never compared with itself), then keeps this one when its frame ran whole.
func (p *Profile) compare(ctx context.Context, in *vocab.Input, rep *Report) {
	guard := in.Env.Profiles
	kept, err := guard.Baseline(ctx, rep.Key)
	if err != nil {
		stepkit.Logger(in).Warn("The baseline profile could not be read.", zap.String("key", rep.Key), zap.Error(err))
	}
	if kept != nil && kept.RunID != in.RunID {
		var base torchtrace.Report
		if err := json.Unmarshal(kept.Report, &base); err == nil {
			rep.Baseline = &vocab.BaselineRef{RunID: kept.RunID, TakenAt: kept.TakenAt, Baseline: kept.Baseline}
			rep.Deltas = torchtrace.Compare(rep.Analysis, &base)
		}
	}
	if rep.CutShort != "" || rep.Recovered != "" {
		return // a partial frame, or one that ran past its duration, is no picture to compare with
	}
	b, err := json.Marshal(rep.Analysis)
	if err != nil {
		return
	}
	if err := guard.KeepReport(ctx, rep.Key, vocab.KeptReport{RunID: in.RunID, Target: rep.Target, Baseline: p.cfg.Baseline,
		TakenAt: rep.Window.End, Report: b}); err != nil {
		stepkit.Logger(in).Warn("The profile report could not be kept for comparisons.", zap.String("key", rep.Key), zap.Error(err))
	}
}

// analysisFindings puts the analysis where `when` and the thread read it.
func analysisFindings(f map[string]any, rep *Report) {
	a := rep.Analysis
	fams := map[string]float64{}
	top, topShare := "", -1.0
	for _, fam := range torchtrace.Families {
		s := a.Families[fam]
		fams[string(fam)] = s
		if s > topShare {
			top, topShare = string(fam), s
		}
	}
	if a.KernelUS > 0 {
		f["top_family"] = top
	}
	f["families"] = fams
	f["idle_share"] = a.IdleShare
	f["frame"] = a.Frame.Source
	f["attribution"] = a.Attribution // every method, by count and by GPU time
	f["credited_time"] = a.Attribution.CreditedTime()
	var other []map[string]any
	for i, k := range a.Unclassified {
		if i == profileTopKernels {
			break
		}
		other = append(other, map[string]any{"name": k.Name, "share": k.Share, "gpu_us": k.GPUus})
	}
	f["unclassified"] = other
	var kernels []map[string]any
	for i, k := range a.TopKernels {
		if i == profileTopKernels {
			break
		}
		kernels = append(kernels, map[string]any{"name": k.Name, "family": string(k.Family), "share": k.Share, "gpu_us": k.GPUus})
	}
	f["top_kernels"] = kernels
	if rep.Baseline != nil {
		f["compared_with"] = map[string]any{"run_id": rep.Baseline.RunID, "taken_at": rep.Baseline.TakenAt, "baseline": rep.Baseline.Baseline}
		var moved []string
		for _, d := range rep.Deltas {
			moved = append(moved, fmt.Sprintf("%s %.0f%% (baseline %.0f%%)", d.Family, 100*d.Share, 100*d.Baseline))
		}
		f["deltas"] = moved
		f["shift"] = jsonValue(shiftOf(rep.Deltas)) // the same, as data: the run page reads it
	}
}
