package prometheus

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/capture/internal/promkit"
	"github.com/autocapture/autocapture/storage"
	"github.com/autocapture/autocapture/vocab"
)

// TestBaselineQueryMovesEveryRangeAndSelector: the baseline query reads the
// same expression over the baseline window, ending the gap before startsAt,
// and a day earlier, in one query: ranges and subqueries take the window,
// selectors outside a range the `@`, a subquery's inside keeps its steps.
func TestBaselineQueryMovesEveryRangeAndSelector(t *testing.T) {
	startsAt := time.Unix(1_800_000_000, 0)
	b := BaselineConfig{Window: 30 * time.Minute, Gap: 5 * time.Minute, DayAgo: new(true)}
	before, day := "1799999700.000", "1799913300.000" // startsAt − 5m, and a day earlier
	cases := []struct{ name, query, want string }{
		{"rate ratio", `sum(rate(a_sum{instance="i"}[2m])) / sum(rate(a_count{instance="i"}[2m]))`,
			`sum(rate(a_sum{instance="i"}[30m] @ T)) / sum(rate(a_count{instance="i"}[30m] @ T))`},
		{"quantile", `histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`,
			`histogram_quantile(0.99, sum by (le) (rate(h_bucket[30m] @ T)))`},
		{"subquery keeps its inside", `max_over_time(sum(w{instance="i"})[2m:])`,
			`max_over_time(sum(w{instance="i"})[30m:] @ T)`},
		{"a bare gauge is read at the moment", `max(w)`, `max(w @ T)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := baselineQuery(promkit.PromQuery{Query: c.query}, b, startsAt)
			if err != nil {
				t.Fatal(err)
			}
			want := `label_replace(` + strings.ReplaceAll(c.want, "T", before) + `, "baseline", "before", "", "") or label_replace(` +
				strings.ReplaceAll(c.want, "T", day) + `, "baseline", "day", "", "")`
			if got != want {
				t.Errorf("baseline query\n got %s\nwant %s", got, want)
			}
		})
	}
	noDay := b
	noDay.DayAgo = new(false)
	got, _ := baselineQuery(promkit.PromQuery{Query: `max(w)`}, noDay, startsAt)
	if strings.Contains(got, " or ") || !strings.Contains(got, before) {
		t.Errorf("day_ago false: %s", got)
	}
}

func TestBaselineConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"own offset", Config{Queries: []promkit.PromQuery{{Name: "a", Signal: vocab.SigPromptTokens, Baseline: true, Query: `rate(x[5m] offset 1h)`}}}, "own @ or offset"},
		{"own @", Config{Queries: []promkit.PromQuery{{Name: "a", Signal: vocab.SigPromptTokens, Baseline: true, Query: `max(x @ 100)`}}}, "own @ or offset"},
		{"scalar", Config{Queries: []promkit.PromQuery{{Name: "a", Signal: vocab.SigPromptTokens, Baseline: true, Query: `scalar(x)`}}}, "want an instant vector"},
		{"unparsable", Config{Queries: []promkit.PromQuery{{Name: "a", Signal: vocab.SigPromptTokens, Baseline: true, Query: `rate(x[5m]`}}}, "baseline:"},
		{"no signal", Config{Queries: []promkit.PromQuery{{Name: "a", Baseline: true, Query: `x`}}}, "baseline needs a signal"},
		{"name clash", Config{Queries: []promkit.PromQuery{{Name: "a", Signal: vocab.SigPromptTokens, Baseline: true, Query: `x`}, {Name: "a_baseline", Query: `y`}}}, "its baseline is named"},
		{"negative window", Config{Queries: []promkit.PromQuery{{Name: "a", Query: `x`}}, Baseline: BaselineConfig{Window: -time.Minute}}, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) || vocab.Classify(err) != vocab.ReasonBadConfig {
				t.Fatalf("err %v, want bad-config containing %q", err, c.want)
			}
		})
	}
}

// TestPrometheusStepReadsBaselines: against a fake Prometheus, a query
// marked `baseline` costs one more query, whose two labelled series become
// <signal>_baseline and <signal>_baseline_1d, described with the window and
// how long before the alert they end; a Prometheus without the day-ago data
// gives the "before" one alone.
func TestPrometheusStepReadsBaselines(t *testing.T) {
	for _, withDay := range []bool{true, false} {
		var mu sync.Mutex
		var queries []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = r.ParseForm()
			q := r.Form.Get("query")
			mu.Lock()
			queries = append(queries, q)
			mu.Unlock()
			vec := model.Vector{&model.Sample{Metric: model.Metric{}, Value: 1500}}
			if strings.Contains(q, "label_replace") {
				vec = model.Vector{&model.Sample{Metric: model.Metric{"baseline": "before"}, Value: 312}}
				if withDay {
					vec = append(vec, &model.Sample{Metric: model.Metric{"baseline": "day"}, Value: 290})
				}
			}
			b, _ := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": vec}})
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		}))
		defer srv.Close()
		step, err := New(Config{
			Queries: []promkit.PromQuery{
				{Name: "prompt_tokens", Signal: vocab.SigPromptTokens, Baseline: true, Query: `sum(rate(p_sum[2m])) / sum(rate(p_count[2m]))`},
				{Name: "queue", Signal: vocab.SigQueueDepth, Query: `max(w)`},
			},
			Baseline: BaselineConfig{Window: 10 * time.Minute, Gap: time.Minute},
		})
		if err != nil {
			t.Fatal(err)
		}
		startsAt := time.Unix(1_800_000_000, 0)
		end := startsAt.Add(2 * time.Minute)
		st, _ := storage.NewLocal(t.TempDir())
		in := &vocab.Input{RunID: "r", StepID: "snapshot", Alert: template.Alert{StartsAt: startsAt, Labels: template.KV{"alertname": "A"}},
			Window: vocab.Window{Start: startsAt.Add(-10 * time.Minute), End: end},
			Env:    &vocab.Env{Prometheus: &vocab.Endpoint{URL: srv.URL}, Store: st}}
		res, err := step.Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if len(queries) != 3 {
			t.Fatalf("%d queries, want 3 (two and one baseline): %q", len(queries), queries)
		}
		if res.Signals[vocab.BaselineOf(vocab.SigPromptTokens, false)] != 312 {
			t.Errorf("signals %v: want prompt_tokens_mean_baseline 312", res.Signals)
		}
		day, ok := res.Signals[vocab.BaselineOf(vocab.SigPromptTokens, true)]
		if withDay != ok || (ok && day != 290) {
			t.Errorf("day-ago %v: signals %v", withDay, res.Signals)
		}
		if _, ok := res.Signals[vocab.BaselineOf(vocab.SigQueueDepth, false)]; ok {
			t.Errorf("a query not marked baseline got one: %v", res.Signals)
		}
		windows := floatMap(res.Findings[vocab.FindingSignalWindows])
		lags := floatMap(res.Findings[vocab.FindingSignalLags])
		if windows[vocab.BaselineOf(vocab.SigPromptTokens, false)] != 600 || lags[vocab.BaselineOf(vocab.SigPromptTokens, false)] != 180 {
			t.Errorf("baseline window %v lag %v: want 600 s ending 180 s before the window's end", windows, lags)
		}
		if withDay && lags[vocab.BaselineOf(vocab.SigPromptTokens, true)] != 180+86400 {
			t.Errorf("day-ago lag %v", lags)
		}
	}
}

// floatMap reads a findings map of numbers as written in this process or
// decoded from JSON.
func floatMap(v any) map[string]float64 {
	switch m := v.(type) {
	case map[string]float64:
		return m
	case map[string]any:
		out := make(map[string]float64, len(m))
		for k, x := range m {
			if f, ok := x.(float64); ok {
				out[k] = f
			}
		}
		return out
	}
	return nil
}
