package vllmsim

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autocapture/autocapture/internal/testkit/fixtures"
)

// The DCGM drift test holds the sim's DCGM surface to recorded scrapes of
// real dcgm-exporters (dcgm-metrics/ under $AUTOCAPTURE_FIXTURES, see its README): every family
// the sim emits exists there with the same TYPE and HELP, and its samples
// carry the same label names in the same order. The one family no recorded
// scrape has, DCGM_FI_DEV_CLOCKS_EVENT_REASONS (not in the exporter's
// default CSV; a team adds it), is held to GPU.md's description instead:
// a gauge (field 112, a bitmask) with the labels every GPU field has.

const (
	fixtureL4  = "l4-kops-2026-03.prom"                   // no pod mapping; no XID, no NVLink series
	fixtureLKE = "rtx4000ada-lke-podmapping-2025-11.prom" // pod mapping on; the full default set
)

// podLabels are the labels the exporter's pod mapping adds.
var podLabels = []string{"container", "namespace", "pod", "pod_uid"}

// gpuMDOptIn are families in no recorded scrape, with GPU.md's TYPE.
var gpuMDOptIn = map[string]string{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "gauge"}

// dcgmFamily is one family of a DCGM exposition.
type dcgmFamily struct {
	typ, help string
	samples   []dcgmSample
}

type dcgmSample struct {
	labels []string // names, in order
	values map[string]string
	value  string
}

// parseDCGM reads an exposition keeping each sample's label order (the
// client_model parsers do not keep it).
func parseDCGM(t *testing.T, text string) map[string]*dcgmFamily {
	t.Helper()
	out := map[string]*dcgmFamily{}
	fam := func(name string) *dcgmFamily {
		if out[name] == nil {
			out[name] = &dcgmFamily{}
		}
		return out[name]
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "# HELP "):
			name, help, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			fam(name).help = help
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			fam(name).typ = typ
		case strings.HasPrefix(line, "#"):
		default:
			name, rest, ok := strings.Cut(line, "{")
			if !ok {
				t.Fatalf("sample without labels: %q", line)
			}
			s := dcgmSample{values: map[string]string{}}
			for {
				k, after, ok := strings.Cut(rest, `="`)
				if !ok {
					t.Fatalf("bad labels in %q", line)
				}
				var v strings.Builder
				i := 0
				for ; i < len(after) && after[i] != '"'; i++ {
					if after[i] == '\\' {
						i++
					}
					v.WriteByte(after[i])
				}
				s.labels = append(s.labels, k)
				s.values[k] = v.String()
				rest = after[i+1:]
				if strings.HasPrefix(rest, ",") {
					rest = rest[1:]
					continue
				}
				if !strings.HasPrefix(rest, "} ") {
					t.Fatalf("bad sample end in %q", line)
				}
				s.value = strings.TrimSpace(rest[2:])
				break
			}
			fam(name).samples = append(fam(name).samples, s)
		}
	}
	return out
}

func readDCGMFixture(t *testing.T, name string) map[string]*dcgmFamily {
	t.Helper()
	return parseDCGM(t, string(fixtures.Read(t, filepath.Join("dcgm-metrics", name))))
}

// scrapeDCGM reads h's DCGM /metrics as a scraper would.
func scrapeDCGM(t *testing.T, h http.Handler) map[string]*dcgmFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return parseDCGM(t, rec.Body.String())
}

func newDCGMSim(t *testing.T, o Options) *Sim {
	t.Helper()
	if o.Start.IsZero() {
		o.Start = time.Unix(1.8e9, 0)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func without(labels, drop []string) []string {
	return slices.DeleteFunc(slices.Clone(labels), func(l string) bool { return slices.Contains(drop, l) })
}

func TestDCGMMatchesRealExporter(t *testing.T) {
	l4, lke := readDCGMFixture(t, fixtureL4), readDCGMFixture(t, fixtureLKE)
	for _, podMapping := range []bool{false, true} {
		name := "bare host"
		o := Options{Load: NoLoad}
		if podMapping {
			name = "pod mapping"
			o.DCGM.PodMapping = &DCGMPod{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}
		}
		t.Run(name, func(t *testing.T) {
			s := newDCGMSim(t, o)
			s.Advance(5 * time.Second)
			got := scrapeDCGM(t, s.DCGMHandler())
			gpuLabels := got["DCGM_FI_DEV_SM_CLOCK"].samples[0].labels
			for fname, g := range got {
				if len(g.samples) != 1 {
					t.Errorf("%s: %d samples, want one (one GPU)", fname, len(g.samples))
					continue
				}
				labels := g.samples[0].labels
				ref, inLKE := lke[fname]
				if l, inL4 := l4[fname]; inL4 && !podMapping {
					ref = l
				}
				if ref == nil {
					typ, ok := gpuMDOptIn[fname]
					switch {
					case !ok:
						t.Errorf("%s: in no recorded scrape and not one of GPU.md's opt-in families", fname)
					case g.typ != typ:
						t.Errorf("%s: TYPE %s, GPU.md says %s", fname, g.typ, typ)
					case !slices.Equal(labels, gpuLabels):
						t.Errorf("%s: labels %v, every GPU field has %v", fname, labels, gpuLabels)
					}
					continue
				}
				if g.typ != ref.typ || g.help != ref.help {
					t.Errorf("%s: TYPE %s HELP %q, the exporter has %s %q", fname, g.typ, g.help, ref.typ, ref.help)
				}
				want := ref.samples[0].labels
				if !podMapping && !inL4(l4, fname) && inLKE {
					want = without(want, podLabels) // only the pod-mapped scrape has it
				}
				if !slices.Equal(labels, want) {
					t.Errorf("%s: labels %v, the exporter writes %v", fname, labels, want)
				}
			}
			for _, fx := range []map[string]*dcgmFamily{l4, lke} {
				for fname := range fx {
					if got[fname] == nil {
						t.Errorf("%s: in a recorded default scrape, not emitted by the sim", fname)
					}
				}
			}
		})
	}
}

func inL4(l4 map[string]*dcgmFamily, name string) bool { return l4[name] != nil }

// TestDCGMFixturesAgree checks the two recorded scrapes with each other: the
// same families, types and help, and the same label order once the pod
// mapping's labels are set aside, so either is a fair reference.
func TestDCGMFixturesAgree(t *testing.T) {
	l4, lke := readDCGMFixture(t, fixtureL4), readDCGMFixture(t, fixtureLKE)
	for name, a := range l4 {
		b := lke[name]
		if b == nil {
			t.Errorf("%s: in %s, not in %s", name, fixtureL4, fixtureLKE)
			continue
		}
		if a.typ != b.typ || a.help != b.help || !slices.Equal(a.samples[0].labels, without(b.samples[0].labels, podLabels)) {
			t.Errorf("%s: %s %q %v vs %s %q %v", name, a.typ, a.help, a.samples[0].labels, b.typ, b.help, b.samples[0].labels)
		}
	}
	if extra := len(lke) - len(l4); extra != 2 || lke["DCGM_FI_DEV_XID_ERRORS"] == nil || lke["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == nil {
		t.Errorf("%s should add exactly XID_ERRORS and NVLINK_BANDWIDTH_TOTAL to %s (%d more)", fixtureLKE, fixtureL4, extra)
	}
}
