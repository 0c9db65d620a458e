package runpage

import (
	"encoding/json"
	"html/template"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/autocapture/autocapture/runner/executor"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// What the run pages' templates read: the run taken apart into what each
// section shows, so the templates hold layout only.

// kv is one label, annotation or basis entry, in key order.
type kv struct{ Key, Value string }

func sortedKV(m map[string]string) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

type listView struct {
	Query    runs.ListQuery
	Statuses []vocab.Status
	Page     runs.Page
	Rows     []listRow
	NextURL  string
}

type listRow struct {
	Run      runs.Run
	Href     string
	Verdict  string
	Instance string
	Took     string
}

func newListRow(r runs.Run) listRow {
	r = shownRun(r)
	row := listRow{Run: r, Href: runPath(r.ID), Instance: r.Labels["instance"]}
	if r.Verdict != nil {
		row.Verdict = r.Verdict.ID
	}
	if r.StartedAt != nil && r.FinishedAt != nil {
		row.Took = humanDuration(r.FinishedAt.Sub(*r.StartedAt))
	}
	return row
}

type runView struct {
	Run         *runs.Run
	Head        headline
	Timeline    timeline
	Labels      []kv
	Annotations []kv
	Verdict     *vocab.Verdict
	Scope       string   // vocab.ScopeText: "scope: single-instance — …"
	Advice      []string // the verdict's advice and its contributing factors'
	Basis       []kv     // in words: "mean prefill time", "absolute threshold (no baseline)"
	History     []historyEntry
	Charts      []artifactView
	Traces      []traceView
	Profiles    []profileView
	Artifacts   []artifactView
	Manifest    *artifactView
	// RepeatHref links the key artifact of the earlier run whose verdict
	// this one repeats (Run.Repeat); "" for none.
	RepeatHref string
	Steps      []stepView
	Took       string
	// From GET /api/v1/runs/{id}/profile, when profiling is served.
	Lease         *runs.ProfileLease
	ProfileEvents []runs.ProfileEvent
	ProfileError  string
	// Silence is the Silence form, for a signed-in reader; nil: none.
	Silence *silenceView
}

// Title is the page's title: the answer, the alert, the run.
func (v runView) Title() string {
	t := v.Head.Verdict
	if v.Run.Alertname != "" {
		t += " · " + v.Run.Alertname
	}
	return t + " · " + v.Run.ID
}

type historyEntry struct {
	runs.VerdictEntry
	ID string
}

type artifactView struct {
	Step, Name, Key, ContentType string
	Size                         int64
	Pending                      bool
	Href                         string
}

// KeyParts is the storage key, wrapping between its parts (keySegments).
func (a artifactView) KeyParts() template.HTML { return keySegments(a.Key) }

// NameParts is the file name, wrapping after its dots and underscores.
func (a artifactView) NameParts() template.HTML { return nameBreaks(a.Name) }

type stepView struct {
	executor.StepRecord
	Took       string
	StatusText string // the status in words: "not configured"
}

// traceView is one of the traces step's slowest spans (findings "slowest").
type traceView struct {
	Step         string  `json:"-"`
	TraceID      string  `json:"trace_id"`
	RequestID    string  `json:"request_id"`
	TTFT         float64 `json:"ttft"`
	Queue        float64 `json:"queue"`
	Prefill      float64 `json:"prefill"`
	Decode       float64 `json:"decode"`
	E2E          float64 `json:"e2e"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Link         string  `json:"link"`
}

// decodeFindings reads findings into dst through JSON: they are JSON as
// stored (float64s, []any), Go values as a step made them; either decodes.
// A finding of an unexpected shape is left out, never an error of the page.
func decodeFindings(f map[string]any, dst any) bool {
	if len(f) == 0 {
		return false
	}
	b, err := json.Marshal(f)
	if err != nil {
		return false
	}
	return json.Unmarshal(b, dst) == nil
}

func (p *Pages) newRunView(r *runs.Run) runView {
	shown := shownRun(*r)
	r = &shown
	v := runView{Run: r, Labels: sortedKV(r.Labels), Annotations: sortedKV(r.Annotations), Verdict: r.Verdict,
		Timeline: newTimeline(r, p.o.Now())}
	if r.Verdict != nil {
		v.Basis = basisInWords(r.Verdict.Basis)
		v.Scope, v.Advice = vocab.ScopeText(r.Verdict), vocab.AllAdvice(r.Verdict)
	}
	if r.StartedAt != nil && r.FinishedAt != nil {
		v.Took = humanDuration(r.FinishedAt.Sub(*r.StartedAt))
	}
	for _, e := range r.Verdicts {
		h := historyEntry{VerdictEntry: e}
		if e.Verdict != nil {
			h.ID = e.Verdict.ID
		}
		v.History = append(v.History, h)
	}
	for _, st := range r.Steps {
		v.Steps = append(v.Steps, stepView{StepRecord: st, Took: humanDuration(time.Duration(st.DurationMS) * time.Millisecond),
			StatusText: stepStatusText(st.Status)})
		for _, a := range st.Artifacts {
			av := artifactView{Step: st.Plan + "/" + st.ID, Name: a.Name, Key: a.Key, ContentType: a.ContentType,
				Size: a.Size, Pending: a.Pending, Href: p.artifactHref(r.ID, a.Key)}
			v.Artifacts = append(v.Artifacts, av)
			if st.Kind == "chart" && strings.HasPrefix(a.ContentType, "image/png") && av.Href != "" {
				v.Charts = append(v.Charts, av)
			}
		}
		switch st.Kind {
		case "traces":
			var f struct {
				Slowest []traceView `json:"slowest"`
			}
			if decodeFindings(st.Findings, &f) {
				for _, t := range f.Slowest {
					t.Step = st.Plan + "/" + st.ID
					if !webLink(t.Link) {
						t.Link = "" // a finding, not a place to send a reader
					}
					v.Traces = append(v.Traces, t)
				}
			}
		case "profile":
			if pv, ok := newProfileView(st.Plan+"/"+st.ID, st.Summary, st.Findings); ok {
				v.Profiles = append(v.Profiles, pv)
			}
		}
	}
	v.Head = newHeadline(r, len(r.Steps))
	if rep := r.Repeat; rep != nil {
		v.RepeatHref = p.artifactHref(rep.Run.ID, rep.EvidenceKey)
	}
	if r.Manifest != "" {
		v.Manifest = &artifactView{Name: "manifest.json", Key: r.Manifest, ContentType: "application/json",
			Href: p.artifactHref(r.ID, r.Manifest)}
	}
	return v
}

// webLink says whether u is an absolute http(s) URL, the only links to
// other places the page makes.
func webLink(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != ""
}
