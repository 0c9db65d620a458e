package gpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/autocapture/autocapture/capture/internal/views"
)

// How a GPU is judged, for the gpu step's summary and triage's gpu-degraded
// rule (capture/triage/triagegpu.go), which states the rule.

// DefaultClockRatio is the fraction of its max SM clock below which a GPU
// under load counts as degraded, unless triage's gpu_clock_ratio says otherwise.
const DefaultClockRatio = 0.8

// gpuLoaded is the mean util (0..1) from which a GPU counts as under load.
const gpuLoaded = 0.1

// clockEventMeaning says what each clock event reason means, for the evidence.
var clockEventMeaning = map[string]string{
	"gpu_idle":       "GPU idle, nothing to run",
	"clocks_setting": "application clocks setting (nvidia-smi -ac)",
	"power_cap":      "software power cap: the GPU draws its power limit and lowers its clocks to stay under it",
	"hw_slowdown":    "hardware slowdown: clocks cut for temperature, an external power brake or power-supply protection",
	"sync_boost":     "sync boost: clocks held to the slowest GPU of its group",
	"sw_thermal":     "software thermal slowdown, the GPU is too hot",
	"hw_thermal":     "hardware thermal slowdown, the GPU is far too hot (its own protection)",
	"hw_power_brake": "hardware power brake: the node's power supply told the GPU to slow down",
	"display_clocks": "display clocks setting",
}

// abnormalAlways are the reasons that degrade a GPU whatever its clock.
var abnormalAlways = map[string]bool{"sw_thermal": true, "hw_thermal": true, "hw_slowdown": true, "hw_power_brake": true}

// xidMeaning are the common meanings of frequent XIDs, after NVIDIA's Xid
// catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
// and its dynamic page retirement notes
// (https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html).
var xidMeaning = map[int]string{
	13:  "graphics engine exception: usually the application (an illegal access); the GPU if it repeats across applications",
	31:  "GPU memory page fault: usually the application's illegal memory access",
	43:  "GPU stopped processing: the application hit a fault and its channel was reset",
	45:  "preemptive cleanup after earlier errors",
	48:  "double-bit ECC error (DBE): uncorrectable memory error; drain and reset the GPU",
	63:  "ECC page retirement or row remapping recorded: reset the GPU to apply it",
	64:  "ECC page retirement or row remapping failed: the memory cannot be repaired, an RMA candidate",
	74:  "NVLink error",
	79:  "the GPU has fallen off the bus: drain the node and reboot it; RMA if it repeats",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error: the affected application must restart; reset the GPU when it can be drained",
	95:  "uncontained ECC error: every application on the GPU is affected; drain and reset the GPU",
	119: "GSP RPC timeout: reset the GPU",
	120: "GSP error: reset the GPU",
}

// Check judges one GPU: short tokens for the gpu step's summary and full
// lines for the verdict's evidence, empty when it is not degraded. ratio is
// Thresholds.GPUClockRatio; running says the instance has requests running.
func Check(g views.GPUState, ratio float64, running bool) (short, lines []string) {
	who := "GPU " + g.GPU
	if g.Hostname != "" {
		who += " on " + g.Hostname
	}
	if g.Model != "" {
		who += " (" + g.Model + ")"
	}
	loaded := (g.Util != nil && *g.Util >= gpuLoaded) || (g.Util == nil && running)
	low := loaded && g.SMClockMHz != nil && g.SMClockMaxMHz != nil && *g.SMClockMaxMHz > 0 &&
		*g.SMClockMHz < ratio**g.SMClockMaxMHz
	var reasons []string
	for _, e := range g.ClockEvents {
		if abnormalAlways[e] || (e == "power_cap" && low) {
			short = append(short, e)
			m := clockEventMeaning[e]
			reasons = append(reasons, e+": "+m)
		}
	}
	if low && len(reasons) == 0 {
		short = append(short, "SM clock low")
		why := "no clock event reason explains it"
		if !g.ClockEventsMeasured {
			why = "clock event reasons not measured (" + FieldByID(112).Classic + " is not in the exporter's CSV)"
		}
		reasons = append(reasons, fmt.Sprintf("SM clock below %.0f%% of its max under load (%s)", 100*ratio, why))
	}
	figures := strings.Join(Figures(g), ", ")
	if read := seriesNames(g, "clock_events", "sm_clock_mhz", "sm_clock_max_mhz", "temp_c", "power_w", "util"); read != "" {
		figures += " (" + read + ")"
	}
	if len(reasons) > 0 {
		lines = append(lines, who+": "+strings.Join(reasons, "; ")+"; "+figures)
	}
	for _, x := range g.XIDs {
		short = append(short, fmt.Sprintf("XID %d", x))
		m := xidMeaning[x]
		if m == "" {
			m = "see NVIDIA's Xid catalog"
		}
		lines = append(lines, fmt.Sprintf("%s: XID %d in the window: %s%s", who, x, m, readFrom(g, "xids")))
	}
	if e := g.ECCUncorrectable; e != nil && *e > 0 {
		short = append(short, fmt.Sprintf("%.0f uncorrectable ECC", *e))
		lines = append(lines, fmt.Sprintf("%s: %s in the window (%s): drain and reset the GPU", who, plural(*e, "uncorrectable ECC error"), eccParts(g)))
	}
	if f := g.RowRemapFailure; f != nil && *f > 0 {
		short = append(short, "row remap failure")
		lines = append(lines, who+": row remapping failed"+readFrom(g, "row_remap_failure")+": the memory cannot be repaired, an RMA candidate")
	}
	if n := g.NVLinkErrors; n != nil && *n > 0 && len(lines) > 0 {
		lines = append(lines, fmt.Sprintf("%s: %s (CRC, replay, recovery) in the window%s", who, plural(*n, "NVLink error"), readFrom(g, "nvlink_errors")))
	}
	if len(lines) > 0 && len(reasons) == 0 && figures != "" {
		lines = append(lines, who+": "+figures) // the numbers of a GPU degraded for another reason
	}
	return short, lines
}

// plural is "1 thing" or "n things".
func plural(n float64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%.0f %ss", n, thing)
}

// eccParts says what the uncorrectable ECC count is made of and from which
// series: "uncorrectable remapped rows +1 (DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL)".
func eccParts(g views.GPUState) string {
	var parts []string
	if r := g.RemappedRowsUncorrectable; r != nil && *r > 0 {
		parts = append(parts, fmt.Sprintf("uncorrectable remapped rows +%.0f%s", *r, readFrom(g, "remapped_rows_uncorrectable")))
	}
	if d := g.ECCDBE; d != nil && *d > 0 {
		parts = append(parts, fmt.Sprintf("double-bit ECC +%.0f%s", *d, readFrom(g, "ecc_dbe")))
	}
	if len(parts) == 0 { // a view written before the breakdown
		return "DBE / uncorrectable remapped rows"
	}
	return strings.Join(parts, "; ")
}

// seriesNames lists the DCGM series the readings were read from, in order,
// each once; "" when the view does not say (written before it did).
func seriesNames(g views.GPUState, readings ...string) string {
	var names []string
	for _, r := range readings {
		names = views.AppendNew(names, g.Series[r]...)
	}
	return strings.Join(names, ", ")
}

// readFrom is " (SERIES, …)" for a reading, "" when the view does not say.
func readFrom(g views.GPUState, reading string) string {
	if n := seriesNames(g, reading); n != "" {
		return " (" + n + ")"
	}
	return ""
}

// Figures are a GPU's numbers: "SM 1089/1980 MHz (55%)", "88 °C", "412 W".
func Figures(g views.GPUState) []string {
	var out []string
	switch {
	case g.SMClockMHz != nil && g.SMClockMaxMHz != nil && *g.SMClockMaxMHz > 0:
		out = append(out, fmt.Sprintf("SM %.0f/%.0f MHz (%.0f%%)", *g.SMClockMHz, *g.SMClockMaxMHz, 100**g.SMClockMHz / *g.SMClockMaxMHz))
	case g.SMClockMHz != nil:
		out = append(out, fmt.Sprintf("SM %.0f MHz (max not measured)", *g.SMClockMHz))
	}
	if g.TempC != nil {
		out = append(out, fmt.Sprintf("%.0f °C", *g.TempC))
	}
	if g.PowerW != nil {
		out = append(out, fmt.Sprintf("%.0f W", *g.PowerW))
	}
	if g.Util != nil {
		out = append(out, fmt.Sprintf("util %.0f%%", 100**g.Util))
	}
	return out
}

// UnmeasuredWhy says why a view has no GPU.
func UnmeasuredWhy(v *views.GPUView) string {
	if len(v.Failed) >= len(QueryNames) {
		return "every DCGM query failed (" + FailedList(v.Failed) + ")"
	}
	why := fmt.Sprintf("no DCGM series matched {%s} (is the DCGM exporter scraped, and does the selector map the instance to its GPUs?)", v.Selector)
	if len(v.Failed) > 0 {
		why += "; " + FailedList(v.Failed)
	}
	return why
}

// FailedList is "name reason; …" in name order, the queries that failed the
// same way named together ("gpu_errors and gpu_gauges unreachable: …"): a
// Prometheus that is down fails every query alike, and its error is said once.
func FailedList(failed map[string]string) string {
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	byWhy := map[string][]string{}
	var order []string
	for _, n := range names {
		if _, seen := byWhy[failed[n]]; !seen {
			order = append(order, failed[n])
		}
		byWhy[failed[n]] = append(byWhy[failed[n]], n)
	}
	out := make([]string, len(order))
	for i, why := range order {
		out[i] = andList(byWhy[why]) + " " + why
	}
	return strings.Join(out, "; ")
}

// andList is "a", "a and b", "a, b and c".
func andList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}
