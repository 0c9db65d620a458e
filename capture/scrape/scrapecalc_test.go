package scrape

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/internal/testkit/fixtures"
	"github.com/autocapture/autocapture/vocab"
)

// readFixture is a real vLLM /metrics scrape recorded by another project
// (vllm-metrics/ under $AUTOCAPTURE_FIXTURES, each with its origin in the
// .source.txt beside it; internal/testkit/fixtures skips the test where it is unset).
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	return fixtures.Read(t, filepath.Join("vllm-metrics", name))
}

func mustParse(t *testing.T, body string, where map[string]string) exposition.Exposition {
	t.Helper()
	e, err := exposition.ParseExposition([]byte(body), where)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return e
}

// ttftExposition is a TTFT histogram of two engines with the given cumulative
// counts at le = 0.1, 1, 10, +Inf, each engine holding half.
func ttftExposition(c01, c1, c10, inf, sum float64) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
	for _, eng := range []string{"0", "1"} {
		l := `engine="` + eng + `",model_name="m"`
		for _, bk := range []struct {
			le string
			c  float64
		}{{"0.1", c01}, {"1.0", c1}, {"10.0", c10}, {"+Inf", inf}} {
			b.WriteString("vllm:time_to_first_token_seconds_bucket{" + l + `,le="` + bk.le + `"} ` + ftoa(bk.c/2) + "\n")
		}
		b.WriteString("vllm:time_to_first_token_seconds_count{" + l + "} " + ftoa(inf/2) + "\n")
		b.WriteString("vllm:time_to_first_token_seconds_sum{" + l + "} " + ftoa(sum/2) + "\n")
	}
	return b.String()
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func TestHistogramQuantileMatchesPromQL(t *testing.T) {
	// 100 observations: 50 below 0.1, 40 in (0.1,1], 9 in (1,10], 1 above 10.
	h := exposition.Histogram{Upper: []float64{0.1, 1, 10, math.Inf(1)}, Cum: []float64{50, 90, 99, 100}, Count: 100, Sum: 80}
	cases := []struct {
		name string
		q    float64
		want float64
	}{
		{"median at the first bucket's top", 0.5, 0.1},
		{"p75 interpolated in (0.1,1]", 0.75, 0.1 + 0.9*25.0/40},
		{"p95 interpolated in (1,10]", 0.95, 1 + 9*5.0/9},
		{"p99 at 10", 0.99, 10},
		{"p999 in +Inf answers the highest finite bound", 0.999, 10},
		{"p10 interpolated from zero", 0.1, 0.1 * 10.0 / 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := h.Quantile(c.q)
			if !ok || math.Abs(got-c.want) > 1e-9 {
				t.Fatalf("quantile(%v) = %v, %v; want %v", c.q, got, ok, c.want)
			}
		})
	}
	if _, ok := (exposition.Histogram{Upper: []float64{1, math.Inf(1)}, Cum: []float64{0, 0}}).Quantile(0.5); ok {
		t.Fatal("an empty histogram gave a quantile")
	}
}

func TestHistogramSinceMergesEnginesAndHandlesReset(t *testing.T) {
	before := mustParse(t, ttftExposition(10, 20, 20, 20, 4), nil)
	after := mustParse(t, ttftExposition(10, 20, 60, 60, 104), nil)
	h0, _ := before.Histogram(exposition.VMTTFT)
	h1, ok := after.Histogram(exposition.VMTTFT)
	if !ok || h1.Count != 60 {
		t.Fatalf("merged count = %v, want 60 (two engines of 30)", h1.Count)
	}
	d := h1.Since(h0)
	if d.Count != 40 || d.Sum != 100 {
		t.Fatalf("delta count/sum = %v/%v, want 40/100", d.Count, d.Sum)
	}
	if p50, _ := d.Quantile(0.5); p50 <= 1 || p50 > 10 {
		t.Fatalf("every new observation is in (1,10], p50 = %v", p50)
	}
	if m, _ := d.Mean(); m != 2.5 {
		t.Fatalf("mean over the gap = %v, want 2.5", m)
	}
	restarted := mustParse(t, ttftExposition(2, 4, 4, 4, 1), nil)
	h2, _ := restarted.Histogram(exposition.VMTTFT)
	if r := h2.Since(h1); r.Count != 4 {
		t.Fatalf("after a restart the delta is what the new process has: %v, want 4", r.Count)
	}
}

func TestScrapeDeltaSignals(t *testing.T) {
	first := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 30
vllm:num_requests_waiting{engine="1"} 12
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 32
vllm:num_requests_running{engine="1"} 32
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.97
vllm:kv_cache_usage_perc{engine="1"} 0.50
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0"} 100
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop"} 100
vllm:request_success_total{engine="0",finished_reason="abort"} 10
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0"} 100
`
	second := strings.NewReplacer(`engine="0"} 30`, `engine="0"} 2`, `engine="0"} 0.97`, `engine="0"} 0.90`,
		`vllm:num_preemptions_total{engine="0"} 100`, `vllm:num_preemptions_total{engine="0"} 110`,
		`finished_reason="stop"} 100`, `finished_reason="stop"} 190`,
		`finished_reason="abort"} 10`, `finished_reason="abort"} 20`,
		`queries_total{engine="0"} 1000`, `queries_total{engine="0"} 2000`,
		`hits_total{engine="0"} 100`, `hits_total{engine="0"} 600`).Replace(first)
	p, c := mustParse(t, first, nil), mustParse(t, second, nil)
	got := Delta{Prev: &p, Cur: c, Gap: 5 * time.Second}.Signals()
	want := vocab.Signals{
		vocab.SigQueueDepth:      42,   // the higher reading: 30+12 before, 2+12 after
		vocab.SigRunning:         32,   // per engine: the widest batch (max-num-seqs applies to each)
		vocab.SigKVUsage:         0.97, // the fullest pool, at either reading
		vocab.SigPreemptionsRate: 2,    // 10 in 5 s
		vocab.SigAbortRatio:      0.1,  // 10 of 100 finished in the gap
		vocab.SigRequestRate:     20,
		vocab.SigPrefixHitRatio:  0.5,
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	one := Delta{Cur: c}.Signals()
	if _, ok := one[vocab.SigPreemptionsRate]; ok {
		t.Error("a single scrape cannot give a rate")
	}
	if one[vocab.SigAbortRatio] != 20.0/210 {
		t.Errorf("single-scrape abort ratio = %v, want the lifetime 20/210", one[vocab.SigAbortRatio])
	}
}
