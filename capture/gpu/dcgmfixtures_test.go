package gpu

import (
	"math"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/capture/internal/exposition"
	"github.com/autocapture/autocapture/internal/testkit/fixtures"
)

// Real dcgm-exporter scrapes (dcgm-metrics/ under $AUTOCAPTURE_FIXTURES,
// both the classic generation with the default CSV; see its README) against
// the table: the exporter's HELP says what a family means, independently of
// its name, so a family that means one of our fields must carry the name
// the table gives that field, with its type; and a real scrape read through
// the accumulator gives the numbers it holds.

// dcgmScrape is one recorded scrape and the fields of the table whose
// (uncommented) CSV rows it must show, by DCGM field id, with what the
// accumulator must read from it (the values as the file has them).
type dcgmScrape struct {
	file           string
	fields         []int
	temp, power, u float64
	xidReported    bool
}

var dcgmScrapes = []dcgmScrape{
	// No XID row: DCGM left the field blank and the exporter skipped it.
	{file: "l4-kops-2026-03.prom", fields: []int{100, 150, 155, 203, 393, 395, 1001}, temp: 31, power: 16.365, u: 0},
	{file: "rtx4000ada-lke-podmapping-2025-11.prom", fields: []int{100, 150, 155, 203, 230, 393, 395, 1001},
		temp: 48, power: 40.979, u: 0.004656, xidReported: true},
}

func readDCGMScrape(t *testing.T, file string) map[string]*dto.MetricFamily {
	t.Helper()
	e, err := exposition.ParseExposition(fixtures.Read(t, path.Join("dcgm-metrics", file)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.Fams
}

// TestDCGMTableKnowsRealExporterNames: every DCGM_FI_ family of a real
// scrape whose HELP is one of our fields' is that field's classic name in
// the table, with the exporter's type; a family the table names is one of
// the fields the test expects there; and every expected field is there.
func TestDCGMTableKnowsRealExporterNames(t *testing.T) {
	for _, sc := range dcgmScrapes {
		t.Run(sc.file, func(t *testing.T) {
			found := map[int]bool{}
			for name, fam := range readDCGMScrape(t, sc.file) {
				if !strings.HasPrefix(name, "DCGM_FI_") {
					continue
				}
				typ := strings.ToLower(fam.GetType().String())
				for _, f := range dcgmFields {
					if f.Help == "" || f.Help != fam.GetHelp() {
						continue
					}
					found[f.ID] = true
					if name != f.Classic && !slices.Contains(f.Aliases, name) {
						t.Errorf("%s (HELP %q) means field %d, which the table names %s", name, fam.GetHelp(), f.ID, f.Classic)
					}
					if typ != f.Type {
						t.Errorf("%s: the exporter writes a %s, the table says %s", name, typ, f.Type)
					}
				}
				if n, ok := dcgmByName[name]; ok {
					if n.current && n.field.Current != n.field.Classic {
						t.Errorf("%s: a classic-generation scrape, the table has the name as the current generation's", name)
					}
					if !slices.Contains(sc.fields, n.field.ID) {
						t.Errorf("%s: the table reads it as field %d, not one expected in this scrape", name, n.field.ID)
					}
				}
			}
			for _, id := range sc.fields {
				if !found[id] {
					t.Errorf("field %d (%s): no family of the scrape has its HELP %q", id, FieldByID(id).Classic, FieldByID(id).Help)
				}
			}
		})
	}
}

// TestDCGMRealScrapeThroughTheAccumulator: a real scrape's samples, read as
// Prometheus would return them, give one idle GPU with the file's numbers
// and nothing abnormal.
func TestDCGMRealScrapeThroughTheAccumulator(t *testing.T) {
	start := time.Unix(1.8e9, 0)
	for _, sc := range dcgmScrapes {
		t.Run(sc.file, func(t *testing.T) {
			var m model.Matrix
			for name, fam := range readDCGMScrape(t, sc.file) {
				for _, s := range fam.GetMetric() {
					lm := model.Metric{model.MetricNameLabel: model.LabelValue(name), "instance": "node:9400"}
					for _, lp := range s.GetLabel() {
						lm[model.LabelName(lp.GetName())] = model.LabelValue(lp.GetValue())
					}
					v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
					m = append(m, series(lm, start, v))
				}
			}
			a := NewAccumulator(start)
			a.Add(m)
			sts := a.States()
			if len(sts) != 1 {
				t.Fatalf("%d GPUs, the scrape has one", len(sts))
			}
			s := sts[0]
			for _, c := range []struct {
				what string
				got  *float64
				want float64
			}{{"temperature", s.TempC, sc.temp}, {"power", s.PowerW, sc.power}, {"util", s.Util, sc.u}, {"row remap failure", s.RowRemapFailure, 0}} {
				if c.got == nil || math.Abs(*c.got-c.want) > 1e-9 {
					t.Errorf("%s = %v, the scrape has %v", c.what, deref(c.got), c.want)
				}
			}
			// Idle (util under gpuBusy at every sample): no clock under load.
			if s.SMClockMHz != nil || !slices.Contains(s.Series["sm_clock_mhz"], "DCGM_FI_DEV_SM_CLOCK") {
				t.Errorf("idle GPU: SM clock under load %v, read from %v", deref(s.SMClockMHz), s.Series["sm_clock_mhz"])
			}
			if len(s.XIDs) > 0 || (len(s.Series["xids"]) > 0) != sc.xidReported {
				t.Errorf("XIDs %v read from %v", s.XIDs, s.Series["xids"])
			}
			if s.Hostname == "" || s.Model == "" || s.UUID == "" {
				t.Errorf("labels %+v", s)
			}
			if short, _ := Check(s, DefaultClockRatio, true); len(short) > 0 {
				t.Errorf("an idle healthy GPU judged %v", short)
			}
		})
	}
}
