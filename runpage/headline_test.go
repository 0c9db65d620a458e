package runpage

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/htmldoc"

	"golang.org/x/net/html"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// The run page leads with its answer (headline.go), lays out what
// happened when (timeline.go) and says its identifiers in words
// (words.go); these tests read the rendered page as a browser gets it.

var hlAt = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// servePage renders run r's page as the pages serve it, and parses it.
func servePage(t *testing.T, r *runs.Run) *html.Node {
	t.Helper()
	f := newPageServer(t)
	f.runs.runs = append(f.runs.runs, r)
	res, body := fetch(t, f.srv.URL+"/runs/"+url.PathEscape(r.ID), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET the page of %s: %d\n%s", r.ID, res.StatusCode, body)
	}
	return htmldoc.Parse(t, body)
}

// profileStep is a profile step whose findings (JSON-shaped, as stored)
// compare the capture with a kept one: GEMM grew from 49% to 93%.
func profileStep(baseline bool) executor.StepRecord {
	return executor.StepRecord{Plan: "vllm", ID: "profile", Kind: "profile", Tier: vocab.TierProfile, Status: vocab.StatusSucceeded,
		StartedAt: hlAt.Add(20 * time.Second), FinishedAt: hlAt.Add(52 * time.Second), DurationMS: 32000,
		Summary: "profile 10.0.0.9:8000 30s: GEMM 93% of GPU time (baseline 49%) · top kernel ampere_bf16_s16816gemm… 88% · GPU idle 4%",
		Findings: map[string]any{"top_family": "gemm", "idle_share": 0.04,
			"families":      map[string]any{"gemm": 0.93, "attention": 0.04, "communication": 0.0, "memory": 0.02, "other": 0.01},
			"top_kernels":   []any{map[string]any{"name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "family": "gemm", "share": 0.88, "gpu_us": 2.6e7}},
			"compared_with": map[string]any{"run_id": "0197-healthy", "taken_at": "2026-04-30T09:00:00Z", "baseline": baseline},
			"shift": []any{map[string]any{"family": "attention", "share": 0.04, "baseline": 0.40},
				map[string]any{"family": "gemm", "share": 0.93, "baseline": 0.49}, map[string]any{"family": "other", "share": 0.01, "baseline": 0.09}}}}
}

// gemmFinding is the finding profileStep's capture refines the verdict with.
func gemmFinding(baseline bool) *vocab.ProfileFinding {
	return &vocab.ProfileFinding{Plan: "vllm", Step: "profile", Family: "gemm", Share: 0.93, HasBaseline: true, BaselineShare: 0.49,
		Baseline: &vocab.BaselineRef{RunID: "0197-healthy", Baseline: baseline}, TopKernel: "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
		TopKernelShare: 0.88, Shares: map[string]float64{"gemm": 0.93, "attention": 0.04, "memory": 0.02, "other": 0.01}, OtherShare: 0.01}
}

// hlRun is a run of VLLMHighITL on 10.0.0.9:8000 in status, with v and steps.
func hlRun(id string, status vocab.Status, reason string, v *vocab.Verdict, steps ...executor.StepRecord) *runs.Run {
	started := hlAt.Add(400 * time.Millisecond)
	r := &runs.Run{ID: id, Alertname: "VLLMHighITL", Status: status, Reason: reason, StartsAt: hlAt,
		CreatedAt: hlAt.Add(300 * time.Millisecond), StartedAt: &started, Verdict: v, Steps: steps,
		Labels: map[string]string{"alertname": "VLLMHighITL", "instance": "10.0.0.9:8000", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}}
	if status != vocab.StatusRunning && status != vocab.StatusQueued {
		fin := hlAt.Add(55 * time.Second)
		r.FinishedAt = &fin
	}
	return r
}

// TestRunPageHeadline: the page's first content is one sentence, the
// verdict in words and the line that explains it (for an unexplained
// verdict, the profile's finding against the capture it was compared with),
// then where the cause sits, and the instance and model; a run without a
// verdict says so and why.
func TestRunPageHeadline(t *testing.T) {
	unexplained := &vocab.Verdict{ID: vocab.VerdictUnexplained, Evidence: []string{
		"ITL p99 0.412 s (threshold 0.2 s)", "load normal: queue 0, batch 12",
		"scope not measured: no view of the model's other instances (no peers step, or it has not answered yet)"}}
	triage := executor.StepRecord{Plan: "vllm", ID: "triage", Kind: "triage", Status: vocab.StatusSucceeded,
		StartedAt: hlAt.Add(12 * time.Second), FinishedAt: hlAt.Add(12 * time.Second)}
	kv := pageRunFixture(nil)
	for _, tc := range []struct {
		name            string
		run             *runs.Run
		headline, scope string // scope "": no scope line
	}{
		{"unexplained, profile against the healthy baseline", hlRun("hl-profile", vocab.StatusSucceeded, "", vocab.WithProfile(unexplained, gemmFinding(true)), triage, profileStep(true)),
			"unexplained by the metrics — profile: GEMM 93% of GPU time vs 49% in the healthy baseline (top kernel ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_st… 88%)",
			"scope: not measured — no view of the model's other instances (no peers step, or it has not answered yet)"},
		{"unexplained, profile against the previous capture", hlRun("hl-previous", vocab.StatusSucceeded, "", vocab.WithProfile(unexplained, gemmFinding(false)), triage, profileStep(false)),
			"unexplained by the metrics — profile: GEMM 93% of GPU time vs 49% in the previous capture (top kernel ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_st… 88%)",
			"scope: not measured — no view of the model's other instances (no peers step, or it has not answered yet)"},
		{"unexplained, profile with no baseline", hlRun("hl-nobase", vocab.StatusSucceeded, "", vocab.WithProfile(unexplained,
			&vocab.ProfileFinding{Family: "gemm", Share: 0.92, Shares: map[string]float64{"gemm": 0.92}}), triage),
			"unexplained by the metrics — profile: GEMM 92% of GPU time; no healthy baseline to compare (set one with `baseline: true` on a profile step run while the server is healthy)",
			"scope: not measured — no view of the model's other instances (no peers step, or it has not answered yet)"},
		// The headline reads the verdict's record, not the profile step's
		// text: a verdict no profile refined keeps its evidence line.
		{"unexplained, a profile step but no finding in the verdict", hlRun("hl-unrefined", vocab.StatusSucceeded, "", unexplained, triage, profileStep(true)),
			"unexplained — ITL p99 0.412 s (threshold 0.2 s)",
			"scope: not measured — no view of the model's other instances (no peers step, or it has not answered yet)"},
		{"unexplained, no profile", hlRun("hl-noprofile", vocab.StatusSucceeded, "", unexplained, triage),
			"unexplained — ITL p99 0.412 s (threshold 0.2 s)",
			"scope: not measured — no view of the model's other instances (no peers step, or it has not answered yet)"},
		{"kv-pressure on this server only", kv,
			"KV cache pressure — KV cache 98% full (threshold 95%)",
			"scope: this server — only this instance: KV usage 98% vs peers' median 40% (3 peers)"},
		{"gpu-degraded on this server", hlRun("hl-gpu", vocab.StatusSucceeded, "", &vocab.Verdict{ID: vocab.VerdictGPUDegraded, Scope: vocab.ScopeSingle,
			Evidence: []string{"GPU 0: sw_thermal clock events, SM clock 990 MHz (55% of max)", "only this instance: ITL p99 0.41 s vs peers' median 0.05 s (4 peers)"}}, triage),
			"GPU degraded — GPU 0: sw_thermal clock events, SM clock 990 MHz (55% of max)",
			"scope: this server's GPU — only this instance: ITL p99 0.41 s vs peers' median 0.05 s (4 peers)"},
		{"nothing measured", hlRun("hl-none", vocab.StatusSucceeded, "", &vocab.Verdict{ID: vocab.VerdictNoEvidence, Evidence: []string{
			"nothing measured: no tier-1 reading came through (every metrics step failed or none ran), so nothing is explained or ruled out",
			"snapshot: not configured: no Prometheus (set prometheus.url)"}}, triage),
			"no evidence — nothing measured: no tier-1 reading came through (every metrics step failed or none ran), so nothing is explained or ruled out", ""},
		{"running, no verdict yet", hlRun("hl-running", vocab.StatusRunning, "", nil, triage),
			"No verdict yet — the run is running; 1 step has finished", ""},
		{"failed, no verdict", hlRun("hl-failed", vocab.StatusFailed, "no step succeeded: scrape (timeout), snapshot (refused)", nil),
			"No verdict — the run failed: no step succeeded: scrape (timeout), snapshot (refused)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := servePage(t, tc.run)
			main := htmldoc.Elements(doc, "main")[0]
			first := main.FirstChild
			for first != nil && first.Type != html.ElementNode {
				first = first.NextSibling
			}
			if first == nil || htmldoc.Attr(first, "id") != "headline" {
				t.Fatalf("the page's first content is %v, want the headline", first)
			}
			if got := htmldoc.Text(htmldoc.ByID(doc, "headline-text")); got != tc.headline {
				t.Errorf("headline:\n got %q\nwant %q", got, tc.headline)
			}
			if got := htmldoc.Text(htmldoc.ByID(doc, "headline-scope")); got != tc.scope {
				t.Errorf("scope:\n got %q\nwant %q", got, tc.scope)
			}
			if got, want := htmldoc.Text(htmldoc.ByID(doc, "instance")), tc.run.Labels["instance"]; got != want {
				t.Errorf("instance %q, want %q", got, want)
			}
			if got, want := htmldoc.Text(htmldoc.ByID(doc, "model")), tc.run.Labels["model_name"]; got != want {
				t.Errorf("model %q, want %q", got, want)
			}
			if a := htmldoc.Text(htmldoc.ByID(doc, "alert")); !strings.HasPrefix(a, tc.run.Alertname+" firing since 2026-05-01 10:00:00 UTC") {
				t.Errorf("alert line %q: want its name, state and start", a)
			}
		})
	}
}

// TestRunPageProfileAgainstBaseline: each kernel family's share beside its
// share in the compared capture and the change, a large change marked
// abnormal; without a comparison the page says the shares alone cannot
// say what changed.
func TestRunPageProfileAgainstBaseline(t *testing.T) {
	doc := servePage(t, hlRun("pf-base", vocab.StatusSucceeded, "", nil, profileStep(true)))
	var rows []string
	for _, tr := range htmldoc.Elements(doc, "tr") {
		if htmldoc.Attr(tr, "class") == "abnormal" {
			rows = append(rows, htmldoc.Text(tr))
		}
	}
	want := []string{"GEMM 93.0% 49% +44 points abnormal", "attention 4.0% 40% -36 points abnormal"}
	if strings.Join(rows, " | ") != strings.Join(want, " | ") {
		t.Errorf("abnormal rows %q, want %q", rows, want)
	}
	if all := htmldoc.Text(doc); !strings.Contains(all, "memory copies 2.0% ≈ 2% about the same") || !strings.Contains(all, "other kernels 1.0% 9% -8 points") {
		t.Errorf("families table: %q", all)
	}

	// A record from before the shift was kept as data: compared, but the
	// page does not read the change back from text.
	old := profileStep(true)
	delete(old.Findings, "shift")
	old.Findings["deltas"] = []any{"gemm 93% (baseline 49%)"}
	if all := htmldoc.Text(servePage(t, hlRun("pf-old", vocab.StatusSucceeded, "", nil, old))); !strings.Contains(all, "GEMM 93.0% — not recorded") {
		t.Errorf("a record without the shift: %q", all)
	}

	lone := profileStep(false)
	delete(lone.Findings, "compared_with")
	delete(lone.Findings, "shift")
	if all := htmldoc.Text(servePage(t, hlRun("pf-lone", vocab.StatusSucceeded, "", nil, lone))); !strings.Contains(all, "Not compared: no earlier capture") {
		t.Errorf("a profile compared with nothing does not say so: %q", all)
	}
}

// TestRunPageTimeline: the alert, the run opening and starting, each step
// from its start (with its end and status), the verdicts, the run's end and
// the resolution, in time order, at their offsets from the alert.
func TestRunPageTimeline(t *testing.T) {
	r := pageRunFixture(nil)
	r.CreatedAt = r.StartsAt.Add(300 * time.Millisecond)
	started, resolved := r.StartsAt.Add(500*time.Millisecond), r.StartsAt.Add(5*time.Minute)
	r.StartedAt, r.ResolvedAt = &started, &resolved
	r.ID = "0198-timeline"
	tl := htmldoc.ByID(servePage(t, r), "timeline")
	if tl == nil {
		t.Fatal("no timeline on the page")
	}
	var got []string
	for _, tr := range htmldoc.Elements(tl, "tr")[1:] { // after the header row
		got = append(got, htmldoc.Text(tr))
	}
	want := []string{
		"+0.0 s alert VLLMHighTTFT fired",
		"+0.3 s run opened",
		"+0.5 s run started",
		"+2.0 s step vllm/kv_chart (chart) succeeded ended +3.2 s, after 1.2 s",
		"+2.0 s step vllm/scrape (scrape) failed ended +17.0 s, after 15.0 s",
		"+20.0 s preliminary verdict: overload waiting for scrape",
		"+1m00s verdict: KV cache pressure was overload",
		"+1m01s step vllm/traces (traces) succeeded ended +1m02s, after 800 ms",
		"+1m02s step vllm/profile (profile) succeeded ended +1m33s, after 31.0 s",
		"+1m35s run ended succeeded",
		"+5m00s alert resolved",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRunPageBasisInWords: the verdict's basis names each signal and how it
// was judged in words; an unknown signal or comparison still reads.
func TestRunPageBasisInWords(t *testing.T) {
	var got []string
	for _, li := range htmldoc.Elements(htmldoc.ByID(servePage(t, pageRunFixture(nil)), "basis"), "li") {
		got = append(got, htmldoc.Text(li))
	}
	want := []string{"mean prefill time: absolute threshold (no baseline)",
		"prompt length now: against its own window before the alert", "queue shape: novel-basis"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("basis %q, want %q", got, want)
	}
}

// TestRunPageStepStatuses: a step that could not run for want of
// configuration reads "not configured" in grey, apart from a red failure;
// a status the page does not know shows its text, grey.
func TestRunPageStepStatuses(t *testing.T) {
	step := func(id string, status vocab.Status) executor.StepRecord {
		return executor.StepRecord{Plan: "vllm", ID: id, Kind: "prometheus", Status: status}
	}
	doc := servePage(t, hlRun("st-run", vocab.StatusPartial, "", nil, step("snapshot", vocab.StatusNotConfigured),
		step("scrape", vocab.StatusFailed), step("gpu", "deferred-by-operator")))
	var got []string
	for _, b := range htmldoc.Elements(htmldoc.ByID(doc, "steps"), "span") {
		got = append(got, htmldoc.Attr(b, "class")+"="+htmldoc.Text(b))
	}
	want := []string{"badge other=not configured", "badge bad=failed", "badge other=deferred-by-operator"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("step badges %q, want %q", got, want)
	}
}

// TestRunPagesTablesLabelled: every table on the run page and the list has
// a caption, and sits in its own scrolling box (a phone scrolls the table,
// not the page).
func TestRunPagesTablesLabelled(t *testing.T) {
	f := newPageServer(t)
	for _, p := range []string{"/runs/" + pageRun, "/runs"} {
		_, body := fetch(t, f.srv.URL+p, nil)
		tables := htmldoc.Elements(htmldoc.Parse(t, body), "table")
		if len(tables) == 0 {
			t.Fatalf("%s: no table", p)
		}
		for _, tb := range tables {
			var first *html.Node
			for c := tb.FirstChild; c != nil && first == nil; c = c.NextSibling {
				if c.Type == html.ElementNode {
					first = c
				}
			}
			if first == nil || first.Data != "caption" || htmldoc.Text(first) == "" {
				t.Errorf("%s: table %q has no caption: %.80q", p, htmldoc.Attr(tb, "id")+htmldoc.Attr(tb, "class"), htmldoc.Text(tb))
			}
			if tb.Parent == nil || htmldoc.Attr(tb.Parent, "class") != "scroll" {
				t.Errorf("%s: table %q is not in a scrolling box", p, htmldoc.Attr(tb, "id")+htmldoc.Attr(tb, "class"))
			}
		}
	}
}

// TestNoEvidenceIsNoCause: a run where nothing was measured is headed grey,
// not in a found cause's red.
func TestNoEvidenceIsNoCause(t *testing.T) {
	h := newHeadline(hlRun("hl-none", vocab.StatusSucceeded, "", &vocab.Verdict{ID: vocab.VerdictNoEvidence,
		Evidence: []string{"nothing measured: …"}}), 1)
	if h.Class != "other" || h.Verdict != "no evidence" {
		t.Errorf("headline class %q, verdict %q: want other (grey) and no evidence", h.Class, h.Verdict)
	}
}
