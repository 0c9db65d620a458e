package torchtrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"
)

// realTraces are the Kineto traces other projects wrote (kineto-traces/
// under $AUTOCAPTURE_FIXTURES; origins and checksums in its SOURCES.md).
// variants: also read rewritten into every other layout (the five small
// traces, one per writer and era: ROCm 2025, a 2023 PyTorch build, the
// 2022 spelling, a 2023 recommender's two ranks; the larger ones are read
// as written, which covers the mid-2024 and ns-resolution layouts on real
// data of their own).
// noGPU: a trace of no CUDA or ROCm device (Meta's MTIA), read only to say
// it holds no GPU activity torchtrace knows.
var realTraces = []struct {
	path     string
	variants bool
	noGPU    bool
}{
	{"hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", true, false},
	{"hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", true, false},
	{"hta/df_index_resolver/df_index_resolver.json.gz", false, false},
	{"hta/mtia_trace_single_rank/mtia_rank_0.json.gz", false, true},
	{"hta/nccl_parser_config/nccl_data.json.gz", false, false},
	{"hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", false, false},
	{"hta/trace_diff/control/control.json.gz", false, false},
	{"hta/trace_diff/test/test.json.gz", false, false},
	{"hta/trace_file_list/inference_rank_1.json.gz", true, false},
	{"hta/trace_filter/sampled_rank-0.json.gz", true, false},
	{"hta/trace_filter/sampled_rank-1.json.gz", true, false},
	{"kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", false, false},
	{"kineto-tb_plugin/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz", false, false},
}

// TestRealTraces reads every real trace, as written and rewritten into each
// layout, over the frame a capture gives (Frame a little longer than the
// recording: the profiler's span), over half of it (Frame clips it) and
// over a wall-clock window in its middle, and holds every figure to the
// reference reading of the same bytes (realref_test.go): kernel counts and
// GPU time per kernel, family shares, idle share, GPU time per operator and
// the number of events credited.
func TestRealTraces(t *testing.T) {
	dir := fixtures.Dir(t, "kineto-traces")
	perDir := map[string]int{}
	for _, tr := range realTraces {
		perDir[filepath.Dir(tr.path)]++
	}
	for _, tr := range realTraces {
		data, err := os.ReadFile(filepath.Join(dir, tr.path))
		if err != nil {
			t.Fatalf("%s: %v", fixtures.Env, err)
		}
		layouts := []string{"as written"}
		if tr.variants {
			layouts = append(layouts, layoutsAll()...)
		}
		for _, layout := range layouts {
			name := filepath.Base(filepath.Dir(tr.path))
			if perDir[filepath.Dir(tr.path)] > 1 { // the two ranks of trace_filter
				name += "-" + strings.TrimSuffix(filepath.Base(tr.path), ".json.gz")
			}
			name += "/" + layout
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				in := data
				if layout != "as written" {
					in = rewrite(t, data, layout)
				}
				if tr.noGPU {
					r, err := Analyze(context.Background(), bytes.NewReader(in), Options{})
					if err != nil || r.KernelUS != 0 || r.Attribution.Events != 0 || Summary(r, nil) != "no GPU activity in the profile" {
						t.Errorf("a trace of no GPU: %v, %+v", err, r)
					}
					return
				}
				checkAgainstReference(t, in)
			})
		}
	}
	t.Run("llm-traces", func(t *testing.T) { llmRealTraces(t, fixtures.Dir(t, "llm-traces")) })
}

func layoutsAll() []string { return layouts }

func checkAgainstReference(t *testing.T, in []byte) {
	doc := decodeRef(t, in)
	lo, hi, ok := doc.span()
	if !ok {
		t.Fatal("no PyTorch Profiler span")
	}
	span := time.Duration(hi - lo)
	cases := []struct {
		name   string
		opt    Options
		lo, hi int64
	}{
		{"capture frame", Options{Frame: span + time.Second}, lo, hi},
		{"frame half the recording", Options{Frame: span / 2}, lo, lo + int64(span/2)},
		{"window in the middle", Options{Window: Window{Start: time.Unix(0, lo+int64(span/4)), End: time.Unix(0, lo+int64(3*span/4))}},
			lo + int64(span/4), lo + int64(3*span/4)},
	}
	for _, c := range cases {
		c.opt.Top = 1 << 20
		got, err := Analyze(context.Background(), bytes.NewReader(in), c.opt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := doc.figures(c.lo, c.hi)
		compare(t, c.name, got, want)
		if c.name == "capture frame" {
			t.Logf("REAL %s", row(got, want))
		}
	}
}

// tol is how far a float sum may be from the reference's integer-ns sum.
func tol(ref float64, events int) float64 { return 1e-9*math.Abs(ref) + 1e-3*float64(events+1) }

func compare(t *testing.T, what string, got *Report, want refFigures) {
	t.Helper()
	if got.Attribution.Events != want.events {
		t.Errorf("%s: %d GPU events in the frame, reference %d", what, got.Attribution.Events, want.events)
	}
	if math.Abs(got.KernelUS-want.kernelUS) > tol(want.kernelUS, want.events) {
		t.Errorf("%s: GPU time %.3f µs, reference %.3f", what, got.KernelUS, want.kernelUS)
	}
	if want.events > 0 {
		if got.Frame.Inexact || got.Frame.Start.UnixNano() != want.frameLo || got.Frame.End.UnixNano() != want.frameHi {
			t.Errorf("%s: frame %+v, reference %d..%d", what, got.Frame, want.frameLo, want.frameHi)
		}
	}
	kernels := map[string]Entry{}
	for _, e := range got.TopKernels {
		kernels[e.Name] = e
	}
	if len(kernels) != len(want.kernels) {
		t.Errorf("%s: %d kernel names, reference %d", what, len(kernels), len(want.kernels))
	}
	for name, st := range want.kernels {
		e := kernels[KernelName(name)]
		if e.Count != st.count || math.Abs(e.GPUus-st.us) > tol(st.us, st.count) {
			t.Errorf("%s: kernel %.60s: %d × %.3f µs, reference %d × %.3f", what, name, e.Count, e.GPUus, st.count, st.us)
		}
	}
	for _, f := range Families {
		if w := share(want.famUS[f], want.kernelUS); math.Abs(got.Families[f]-w) > 1e-6 {
			t.Errorf("%s: %s share %.6f, reference %.6f", what, f, got.Families[f], w)
		}
	}
	if math.Abs(got.IdleShare-want.idle) > 1e-6 {
		t.Errorf("%s: idle %.6f, reference %.6f", what, got.IdleShare, want.idle)
	}
	at := got.Attribution
	credited := at.ByExternalID + at.ByLaunch + at.ByFrame + at.ByGraph + at.ByKernelName
	if credited != want.credited || at.BeforeFrame != want.before || at.ByKernelName != want.byName ||
		at.Uncredited != want.events-want.credited-(want.before-want.byName) {
		t.Errorf("%s: %d of %d credited (%+v), reference %d (%d before the frame, %d by name)",
			what, credited, want.events, at, want.credited, want.before, want.byName)
	}
	ops := map[string]float64{}
	for _, e := range got.TopOps {
		ops[e.Name] = e.GPUus
	}
	for name, us := range want.ops {
		if math.Abs(ops[name]-us) > tol(us, want.events) {
			t.Errorf("%s: operator %s %.3f µs, reference %.3f", what, name, ops[name], us)
		}
	}
	if len(ops) != len(want.ops) {
		t.Errorf("%s: %d operators credited, reference %d", what, len(ops), len(want.ops))
	}
}

// row is one line of the side-by-side table in the closing note.
func row(got *Report, want refFigures) string {
	top := "-"
	if len(got.TopKernels) > 0 {
		top = fmt.Sprintf("%.40s %.1f%%", got.TopKernels[0].Name, 100*got.TopKernels[0].Share)
	}
	return fmt.Sprintf("| %d | gemm %.2f%% attn %.2f%% comm %.2f%% mem %.2f%% other %.2f%% (ref gemm %.2f%%) | idle %.2f%% (ref %.2f%%) | %s | credited %d ext + %d launch of %d (ref %d) |",
		want.events, 100*got.Families[FamilyGEMM], 100*got.Families[FamilyAttention], 100*got.Families[FamilyCommunication],
		100*got.Families[FamilyMemory], 100*got.Families[FamilyOther], 100*share(want.famUS[FamilyGEMM], want.kernelUS),
		100*got.IdleShare, 100*want.idle, top, got.Attribution.ByExternalID, got.Attribution.ByLaunch, want.events, want.credited)
}

// TestPublishedFigures holds torchtrace to the figures the peers publish for
// these files: PyTorch's profiler plugin (tb_plugin's end-to-end test
// asserts result_check_file.txt: each kernel's calls and total µs, each
// operator's device self time) and HTA (21 ncclKernel kernels in
// nccl_data, test_trace_parse.py test_nccl_parser_config).
func TestPublishedFigures(t *testing.T) {
	dir := fixtures.Dir(t, "kineto-traces")
	pages := tbPluginPages(t, filepath.Join(dir, "kineto-tb_plugin/result_check_file.txt.gz"))
	for i, run := range []string{"resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"} {
		t.Run(filepath.Dir(run), func(t *testing.T) {
			r := analyzeFile(t, filepath.Join(dir, "kineto-tb_plugin", run), Options{Top: 1 << 20})
			// The plugin's kernel table lists kernels, not the copies
			// (Memcpy HtoD, Memset) that a report counts beside them.
			kernels := map[string]Entry{}
			copies := 0
			for _, e := range r.TopKernels {
				if e.Family == FamilyMemory {
					copies++
					continue
				}
				kernels[e.Name] = e
			}
			if copies != 2 {
				t.Errorf("%d copy names, the trace has 2 (Memcpy HtoD, Memset)", copies)
			}
			ops := map[string]Entry{}
			for _, e := range r.TopOps {
				ops[e.Name] = e
			}
			// Page 5i+3: the kernel table (name, tensor cores, calls, total µs, …).
			var ktab struct {
				Data struct{ Rows [][]any } `json:"data"`
			}
			mustJSON(t, pages[5*i+3], &ktab)
			if len(ktab.Data.Rows) == 0 || len(ktab.Data.Rows) != len(kernels) {
				t.Errorf("%d kernels, the plugin lists %d", len(kernels), len(ktab.Data.Rows))
			}
			for _, row := range ktab.Data.Rows {
				name, calls, total := row[0].(string), int(row[2].(float64)), row[3].(float64)
				if e := kernels[name]; e.Count != calls || e.GPUus != total {
					t.Errorf("kernel %.60s: %d calls %.0f µs, the plugin %d calls %.0f µs", name, e.Count, e.GPUus, calls, total)
				}
			}
			// Page 5i+2: the operator table; device self time is the GPU
			// time of the kernels each operator launched itself.
			var otab struct {
				Data []struct {
					Name string  `json:"name"`
					Self float64 `json:"device_self_duration"`
				} `json:"data"`
			}
			mustJSON(t, pages[5*i+2], &otab)
			n := 0
			for _, o := range otab.Data {
				if o.Self == 0 {
					continue
				}
				n++
				if e := ops[o.Name]; e.GPUus != o.Self {
					t.Errorf("operator %s: %.0f µs, the plugin %.0f", o.Name, e.GPUus, o.Self)
				}
			}
			if n == 0 || n != len(ops) {
				t.Errorf("%d operators credited, the plugin %d with device time", len(ops), n)
			}
			if r.Attribution.Uncredited != 0 {
				t.Errorf("attribution %+v: the plugin credits every kernel", r.Attribution)
			}
		})
	}
	t.Run("nccl_parser_config", func(t *testing.T) {
		r := analyzeFile(t, filepath.Join(dir, "hta/nccl_parser_config/nccl_data.json.gz"), Options{Top: 1 << 20})
		n := 0
		for _, e := range r.TopKernels {
			if strings.Contains(e.Name, "ncclKernel") {
				n += e.Count
				if e.Family != FamilyCommunication {
					t.Errorf("%s: %s", e.Name, e.Family)
				}
			}
		}
		if n != 21 {
			t.Errorf("%d ncclKernel kernels, HTA counts 21", n)
		}
	})
}

func analyzeFile(t *testing.T, path string, opt Options) *Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", fixtures.Env, err)
	}
	defer f.Close()
	r, err := Analyze(context.Background(), f, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tbPluginPages are the JSON pages of result_check_file.txt (one per line,
// five per run).
func tbPluginPages(t *testing.T, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", fixtures.Env, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	var pages [][]byte
	for _, l := range bytes.Split(buf.Bytes(), []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			pages = append(pages, l)
		}
	}
	if len(pages) != 10 {
		t.Fatalf("result_check_file: %d pages, want 10", len(pages))
	}
	return pages
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
