package gpu

import (
	"fmt"
	"math"
	"slices"
)

// The one table of DCGM series the gpu step reads (gpu.go, gpuacc.go): every
// name it queries or looks up, in both generations of dcgm-exporter names,
// comes from dcgmFields. The queries (Step.queries) and the lookup by
// name (dcgmByName) are derived from it; nothing else in capture spells a
// DCGM name.
//
// Generations: "classic" is what dcgm-exporter up to 4.8 writes with its
// default CSV (etc/default-counters.csv); "current" is the exporter-4.9 /
// DCGM 4.6+ naming standard (dcgmlib/dcgm_field_naming.py: base units HERTZ,
// CELSIUS, WATTS, JOULES, BYTES; suffixes RATIO, TOTAL). The exporter names
// a series by the string its CSV has, so either name of a field may appear.
// Where DCGM changed a field's unit it gave the field a new id (SM clock 100
// in MHz, SM_CLOCK_HERTZ 1603 in Hz); where it only renamed, the id stays.
//
// Sources (cited by file, tag and commit; no name outside them is read):
//   - [csv] NVIDIA/dcgm-exporter 4.5.3-4.8.2 (691c927), etc/default-counters.csv.
//   - [h46] NVIDIA/DCGM v4.6.0 (51b65cc), dcgmlib/dcgm_fields.h: ids, current
//     names, and each classic name as a deprecated alias of its current one.
//   - [h461] NVIDIA/go-dcgm v1.4611.0 (b7fa315), pkg/dcgm/dcgm_fields.h: the
//     base-unit fields 1603 and 1608, which [h46] lacks.
//   - [cache] NVIDIA/DCGM v4.6.0, dcgmlib/src/DcgmCacheManager.cpp: field 203
//     is an INT64 holding NVML's utilization.gpu, a percent.

// DCGMUnit is a DCGM series' unit and the factor that takes its value to
// the GPUView's unit (MHz, °C, W, 0..1, counts).
type DCGMUnit struct {
	// Name is the unit as DCGM documents it.
	Name string `json:"name"`
	// Scale multiplies a reading into the view's unit; 0 means "percent or
	// ratio", decided per series (dcgmPercentOrRatio).
	Scale float64 `json:"scale"`
}

// The units the table uses.
var (
	unitMHz     = DCGMUnit{"MHz", 1}
	unitHz      = DCGMUnit{"Hz", 1e-6}
	unitCelsius = DCGMUnit{"°C", 1}
	unitWatt    = DCGMUnit{"W", 1}
	unitPercent = DCGMUnit{"%", 0.01}
	unitRatio   = DCGMUnit{"ratio 0..1", 1}
	unitPctOrR  = DCGMUnit{"% ([cache]) or ratio 0..1 (GPU.md)", 0}
	unitCount   = DCGMUnit{"count", 1}
	unitBitmask = DCGMUnit{"bitmask of DCGM_CLOCKS_EVENT_REASON_*", 1}
	unitXID     = DCGMUnit{"XID code", 1}
	unitFlag    = DCGMUnit{"0/1", 1}
)

// How a series is folded into a GPUState (gpuacc.go).
type dcgmProc int

const (
	procBitmask    dcgmProc = iota + 1 // OR of every sample
	procEventCount                     // the exporter's per-reason counts (clock_event label)
	procClock                          // per sample, the lowest under load; also the highest seen
	procClockMax                       // instant query: the GPU's max
	procMax                            // the highest in the window
	procUtil                           // per sample, the highest source
	procLastCode                       // the last XID's value: a change to non-zero in the window
	procCodeCount                      // the exporter's per-XID counts (xid label)
	procIncrease                       // counter: its increase over the window
	procFlag                           // the highest in the window, non-zero: set
)

// DCGMField is one DCGM field the gpu step reads: its ids, its names in both
// generations, its unit in each, what it means for triage and where that
// comes from.
type DCGMField struct {
	// ID is the DCGM field id (dcgm_fields.h); 0 for a family of the
	// exporter's own (DCGM_EXP_*), which is not a DCGM field.
	ID int `json:"id"`
	// CurrentID is the id of the current name when DCGM gave it a new one
	// (a unit change); 0: the same as ID.
	CurrentID int `json:"current_id,omitempty"`
	// Classic is the name of dcgm-exporter's CSV up to 4.8.
	Classic string `json:"classic"`
	// Aliases are older names of the same field a CSV may still carry.
	Aliases []string `json:"aliases,omitempty"`
	// Current is the exporter-4.9 / DCGM 4.6+ name (the same as Classic when
	// the field was not renamed).
	Current string `json:"current"`
	// Type is the Prometheus type the exporter writes (gauge, counter).
	Type string `json:"type"`
	// ClassicUnit and CurrentUnit are the unit under each generation's name.
	ClassicUnit DCGMUnit `json:"classic_unit"`
	CurrentUnit DCGMUnit `json:"current_unit"`
	// Reading is the GPUState reading it feeds (its JSON key, and the key of
	// GPUState.Series).
	Reading string `json:"reading"`
	// Meaning says what the field tells triage.
	Meaning string `json:"meaning"`
	// Help is the exporter's HELP for the classic name where its default CSV
	// has the row (commented or not); "" when the CSV has none.
	Help string `json:"help,omitempty"`
	// Source cites where the names, id and units come from.
	Source string `json:"source"`

	proc dcgmProc
}

// Names are every name of the field: classic, aliases, current.
func (f DCGMField) Names() []string {
	out := append([]string{f.Classic}, f.Aliases...)
	if f.Current != f.Classic {
		out = append(out, f.Current)
	}
	return out
}

// DCGMFields returns the table the gpu step reads DCGM by (a copy), for
// checks and docs: vllmsim's tests hold the simulator's names to it.
func DCGMFields() []DCGMField {
	out := slices.Clone(dcgmFields)
	for i := range out {
		out[i].Aliases = slices.Clone(out[i].Aliases)
	}
	return out
}

// dcgmFields is the table; its sources by the short names above ([csv],
// [h46], [h461], [cache]), line numbers the files' at the cited commits.
var dcgmFields = []DCGMField{
	// Clock event (throttle) reasons.
	{ID: 112, Classic: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Aliases: []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"},
		Current: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Type: "gauge", ClassicUnit: unitBitmask, CurrentUnit: unitBitmask,
		Reading: "clock_events", proc: procBitmask,
		Meaning: "why the clocks are held down now: power cap, thermal, HW slowdown, power brake (abnormal) or idle, app clocks, sync boost (routine)",
		Source:  "[h46] :579 (112), :584 DCGM_FI_DEV_CLOCK_THROTTLE_REASONS the deprecated alias; not in [csv], a team adds it; not renamed"},
	{Classic: "DCGM_EXP_CLOCK_EVENTS_COUNT", Current: "DCGM_EXP_CLOCK_EVENTS_COUNT", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "clock_events", proc: procEventCount,
		Meaning: "the exporter's count of each clock event reason (clock_event label) over its window: a reason seen between scrapes",
		Help:    "reported clock events",
		Source:  "[csv] :39 (commented, an exporter family, not a DCGM field)"},
	// SM clock and its max.
	{ID: 100, CurrentID: 1603, Classic: "DCGM_FI_DEV_SM_CLOCK", Current: "DCGM_FI_DEV_SM_CLOCK_HERTZ", Type: "gauge",
		ClassicUnit: unitMHz, CurrentUnit: unitHz, Reading: "sm_clock_mhz", proc: procClock,
		Meaning: "the SM clock: below its max under load, every kernel runs slower",
		Help:    "SM clock frequency (in MHz).",
		Source:  "[csv] :6; [h46] :554 (100, MHz); [h461] :556 deprecated for, :3559 DCGM_FI_DEV_SM_CLOCK_HERTZ 1603 (Hz)"},
	{ID: 113, CurrentID: 1608, Classic: "DCGM_FI_DEV_MAX_SM_CLOCK", Current: "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", Type: "gauge",
		ClassicUnit: unitMHz, CurrentUnit: unitHz, Reading: "sm_clock_max_mhz", proc: procClockMax,
		Meaning: "the GPU's max SM clock, what the clock is compared with (else the highest seen)",
		Source:  "[h46] :589 (113, MHz); [h461] :596 deprecated for, :3584 DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ 1608 (Hz); not in [csv]"},
	// Temperature, power, utilisation.
	{ID: 150, Classic: "DCGM_FI_DEV_GPU_TEMP", Current: "DCGM_FI_DEV_GPU_TEMP_CELSIUS", Type: "gauge",
		ClassicUnit: unitCelsius, CurrentUnit: unitCelsius, Reading: "temp_c", proc: procMax,
		Meaning: "the GPU's temperature: heat behind a thermal slowdown",
		Help:    "GPU temperature (in C).",
		Source:  "[csv] :11; [h46] :619 DCGM_FI_DEV_GPU_TEMP_CELSIUS 150, :3638 the classic name its alias"},
	{ID: 155, Classic: "DCGM_FI_DEV_POWER_USAGE", Current: "DCGM_FI_DEV_BOARD_POWER_WATTS", Type: "gauge",
		ClassicUnit: unitWatt, CurrentUnit: unitWatt, Reading: "power_w", proc: procMax,
		Meaning: "the board's power draw: at its cap behind a power-cap throttle",
		Help:    "Power draw (in W).",
		Source:  "[csv] :14; [h46] :639 DCGM_FI_DEV_BOARD_POWER_WATTS 155 (\"Power usage for the device in Watts\"), :3642 the classic name its alias"},
	{ID: 203, Classic: "DCGM_FI_DEV_GPU_UTIL", Current: "DCGM_FI_DEV_GPU_UTIL_RATIO", Type: "gauge",
		ClassicUnit: unitPercent, CurrentUnit: unitPctOrR, Reading: "util", proc: procUtil,
		Meaning: "the share of time a kernel ran: whether the GPU is under load (an idle GPU drops its clocks on purpose)",
		Help:    "GPU utilization (in %).",
		Source:  "[csv] :23; [h46] :775 DCGM_FI_DEV_GPU_UTIL_RATIO 203, :3657 the classic name its alias; [cache] still a percent under the new name"},
	{ID: 1001, Classic: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", Current: "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", Type: "gauge",
		ClassicUnit: unitRatio, CurrentUnit: unitRatio, Reading: "util", proc: procUtil,
		Meaning: "the graphics/compute engine's active ratio (DCP): utilisation where GPU_UTIL is not reported",
		Help:    "Ratio of time the graphics engine is active.",
		Source:  "[csv] :89; [h46] :2538 DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO 1001, :3821 the classic name its alias"},
	// XIDs.
	{ID: 230, Classic: "DCGM_FI_DEV_XID_ERRORS", Current: "DCGM_FI_DEV_XID_ERROR", Type: "gauge",
		ClassicUnit: unitXID, CurrentUnit: unitXID, Reading: "xids", proc: procLastCode,
		Meaning: "the last XID's code (not a count): a change to non-zero in the window is an XID",
		Help:    "Value of the last XID error encountered.",
		Source:  "[csv] :29; [h46] :806 DCGM_FI_DEV_XID_ERROR 230, :3659 the classic name its alias"},
	{Classic: "DCGM_EXP_XID_ERRORS_COUNT", Current: "DCGM_EXP_XID_ERRORS_COUNT", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "xids", proc: procCodeCount,
		Meaning: "the exporter's count of each XID (xid label) over its window: XIDs between scrapes",
		Help:    "reported XIDs during last window",
		Source:  "[csv] :40 (commented, an exporter family, not a DCGM field)"},
	// Memory errors.
	{ID: 311, Classic: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Current: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "ecc_dbe", proc: procIncrease,
		Meaning: "double-bit (uncorrectable) ECC errors since the driver loaded: drain and reset the GPU",
		Help:    "Total number of double-bit volatile ECC errors.",
		Source:  "[csv] :51 (commented); [h46] :929 (311), not renamed"},
	{ID: 393, Classic: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Current: "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "remapped_rows_uncorrectable", proc: procIncrease,
		Meaning: "memory rows remapped for uncorrectable errors: an uncorrectable ECC error, a reset applies the remap",
		Help:    "Number of remapped rows for uncorrectable errors",
		Source:  "[csv] :72; [h46] :1258 DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL 393, :3672 the classic name its alias"},
	{ID: 395, Classic: "DCGM_FI_DEV_ROW_REMAP_FAILURE", Current: "DCGM_FI_DEV_ROW_REMAP_FAILED", Type: "gauge",
		ClassicUnit: unitFlag, CurrentUnit: unitFlag, Reading: "row_remap_failure", proc: procFlag,
		Meaning: "row remapping failed: the memory cannot be repaired, an RMA candidate",
		Help:    "Whether remapping of rows has failed",
		Source:  "[csv] :74; [h46] :1268 DCGM_FI_DEV_ROW_REMAP_FAILED 395, :3674 the classic name its alias"},
	// NVLink errors, summed over the four counters.
	{ID: 409, Classic: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Current: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "nvlink_errors", proc: procIncrease,
		Meaning: "NVLink flow-control CRC errors, all lanes: a bad link slows the all-reduce",
		Help:    "Total number of NVLink flow-control CRC errors.",
		Source:  "[csv] :61 (commented); [h46] :1308 (409), :3753 the classic name its alias"},
	{ID: 419, Classic: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", Current: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "nvlink_errors", proc: procIncrease,
		Meaning: "NVLink data CRC errors, all lanes",
		Help:    "Total number of NVLink data CRC errors.",
		Source:  "[csv] :62 (commented); [h46] :1343 (419), :3754 the classic name its alias"},
	{ID: 429, Classic: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", Current: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "nvlink_errors", proc: procIncrease,
		Meaning: "NVLink replays (retransmissions), all lanes",
		Help:    "Total number of NVLink retries.",
		Source:  "[csv] :63 (commented); [h46] :1378 (429), :3755 the classic name its alias"},
	{ID: 439, Classic: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", Current: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", Type: "counter",
		ClassicUnit: unitCount, CurrentUnit: unitCount, Reading: "nvlink_errors", proc: procIncrease,
		Meaning: "NVLink link recoveries, all lanes: the link went down and came back",
		Help:    "Total number of NVLink recovery errors.",
		Source:  "[csv] :64 (commented); [h46] :1413 (439), :3756 the classic name its alias"},
}

// FieldByID is the table's row for a DCGM field id; it panics on an id
// the table lacks (a bug in the caller).
func FieldByID(id int) DCGMField {
	for _, f := range dcgmFields {
		if f.ID == id {
			return f
		}
	}
	panic(fmt.Sprintf("capture: DCGM field %d not in dcgmFields", id))
}

// dcgmName is one name of the table as a series carries it.
type dcgmName struct {
	field   *DCGMField
	current bool     // the current generation's name
	unit    DCGMUnit // its unit
}

// dcgmByName maps every name of the table to its field and generation.
var dcgmByName = indexDCGM(dcgmFields)

// indexDCGM builds the lookup; a name listed twice is a bug in the table.
func indexDCGM(fields []DCGMField) map[string]dcgmName {
	out := map[string]dcgmName{}
	put := func(name string, n dcgmName) {
		if _, dup := out[name]; dup {
			panic(fmt.Sprintf("capture: DCGM name %s twice in dcgmFields", name))
		}
		out[name] = n
	}
	for i := range fields {
		f := &fields[i]
		put(f.Classic, dcgmName{field: f, unit: f.ClassicUnit})
		for _, a := range f.Aliases {
			put(a, dcgmName{field: f, unit: f.ClassicUnit})
		}
		if f.Current != f.Classic {
			put(f.Current, dcgmName{field: f, current: true, unit: f.CurrentUnit})
		}
	}
	return out
}

// dcgmNamesOf lists the names of the fields folded by procs, in table order.
func dcgmNamesOf(procs ...dcgmProc) []string {
	var out []string
	for _, f := range dcgmFields {
		if slices.Contains(procs, f.proc) {
			out = append(out, f.Names()...)
		}
	}
	return out
}

// The blank sentinels (dcgm_fields.h): DCGM_INT32_BLANK 0x7ffffff0 and the
// NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED values above it up to
// 0x7fffffff; DCGM_INT64_BLANK 0x7ffffffffffffff0 and DCGM_FP64_BLANK 2^47
// and the values above them.
const (
	dcgmInt32Blank = 0x7ffffff0
	dcgmWideBlank  = 140737488355328 // 2^47: every 64-bit blank is above it
)

// dcgmBlank says whether v, read under name, is one of DCGM's blank
// sentinels (missing, not a value): the 64-bit ones always, and the 32-bit
// ones except for fields in Hz, whose values may pass 2^31.
func dcgmBlank(name string, v float64) bool {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v >= dcgmWideBlank:
		return true
	case dcgmByName[name].unit == unitHz:
		return false
	}
	return v >= dcgmInt32Blank && v <= 0x7fffffff
}

// dcgmPercentOrRatio is the scale of a series whose unit is unitPctOrR
// (DCGM_FI_DEV_GPU_UTIL_RATIO): DCGM 4.6 fills field 203 with NVML's
// integer percent under its new name ([cache]) while GPU.md and the
// simulator read a ratio. A series is a ratio when every sample lies in
// 0..1 and one is fractional (an integer percent never is); else a percent.
func dcgmPercentOrRatio(vals []float64) float64 {
	fractional := false
	for _, v := range vals {
		if v < 0 || v > 1 {
			return unitPercent.Scale
		}
		fractional = fractional || v != math.Trunc(v)
	}
	if fractional {
		return unitRatio.Scale
	}
	return unitPercent.Scale
}
