package vllmsim

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The DCGM exporter surface: what NVIDIA's dcgm-exporter serves on :9400 for
// the node under an instance, with its default counters (etc/default-counters.csv)
// plus DCGM_FI_DEV_CLOCKS_EVENT_REASONS, one series per GPU (tensor-parallel
// rank), labels in the exporter's order, values following the engine: GPU
// utilisation is the engine's busy share of the last 5 s, power follows
// utilisation (and the clock), temperature follows power (or the thermal
// reason), the SM clock sits at max unless a fault throttles it. Its
// families, types, help and labels are held to recorded scrapes by
// dcgm_drift_test.go (dcgm-metrics/ under $AUTOCAPTURE_FIXTURES).

// DCGM metric generations (DCGMOptions.Names).
const (
	DCGMNamesClassic = "classic" // DCGM_FI_DEV_SM_CLOCK (MHz), _TOTAL_ENERGY_CONSUMPTION (mJ), % utilisation, MiB
	DCGMNames49      = "4.9"     // exporter 4.9 / DCGM 4.7 names: _SM_CLOCK_HERTZ (Hz), _GPU_ENERGY_JOULES_TOTAL (J), ratios, bytes
)

// DCGMSentinel is the value DCGM reports for a field the GPU does not
// support (DCGM_INT64_NOT_SUPPORTED); a reader must treat it as missing.
const DCGMSentinel = "9223372036854775794"

// DCGMOptions shape the DCGM surface of a Sim. The zero value is an H100
// node "node-0" with the classic names and the clock event reasons.
type DCGMOptions struct {
	// Hostname is the Hostname label (hostname with Names "4.9"); default "node-0".
	Hostname string
	// ModelName is modelName; default "NVIDIA H100 80GB HBM3".
	ModelName string
	// DriverVersion is the DCGM_FI_DRIVER_VERSION label; default "550.54.15".
	DriverVersion string
	// Names is DCGMNamesClassic (default) or DCGMNames49.
	Names string
	// NoClockEvents leaves DCGM_FI_DEV_CLOCKS_EVENT_REASONS out (it is not in
	// the exporter's default CSV; a team adds it).
	NoClockEvents bool
	// PodMapping, when set, adds the labels the exporter's Kubernetes pod
	// mapping (-k) adds: container, namespace, pod (and an empty pod_uid).
	PodMapping *DCGMPod
	// Sentinels are fields (either generation's name) reported with the
	// not-supported sentinel DCGMSentinel instead of a value, so a reader can
	// be proven to treat them as missing. Without it, the surface reports
	// only fields it has values for: nothing is a sentinel.
	Sentinels []string
}

// DCGMPod is the pod a DCGM series is mapped to.
type DCGMPod struct {
	Namespace, Pod, Container string
}

func (d *DCGMOptions) withDefaults() error {
	if d.Hostname == "" {
		d.Hostname = "node-0"
	}
	if d.ModelName == "" {
		d.ModelName = "NVIDIA H100 80GB HBM3"
	}
	if d.DriverVersion == "" {
		d.DriverVersion = "550.54.15"
	}
	switch d.Names {
	case "":
		d.Names = DCGMNamesClassic
	case DCGMNamesClassic, DCGMNames49:
	default:
		return fmt.Errorf("dcgm names %q: want %s or %s", d.Names, DCGMNamesClassic, DCGMNames49)
	}
	for _, f := range d.Sentinels {
		if lookupDCGMField(f) == nil {
			return fmt.Errorf("dcgm sentinel %q: not a field the surface reports", f)
		}
	}
	if p := d.PodMapping; p != nil && (p.Namespace == "" || p.Pod == "" || p.Container == "") {
		return errors.New("dcgm pod mapping: namespace, pod and container must be set")
	}
	return nil
}

// gpuReading is one GPU's readings at an instant, in classic units.
type gpuReading struct {
	smMHz, memMHz     float64
	tempC, memTempC   float64
	powerW, energyMJ  float64
	util, memUtil     float64 // 0..1
	gr, tensor, dram  float64 // 0..1
	fbFree, fbUsed    float64 // MiB
	fbReserved        float64 // MiB
	pcieTx, pcieRx    float64 // bytes/s
	nvlink            float64
	reasons           uint64
	xid               int
	remapRows         float64 // rows remapped for uncorrectable errors
	remapFailed       float64 // 1: a row remapping failed
	zero              float64 // fields with nothing to report but 0
	vgpuLicenseStatus float64
}

// dcgmField is one row of the exporter's CSV, in both generations.
type dcgmField struct {
	classic, current         string
	typ                      string // gauge, counter
	help, helpCurrent        string
	float                    bool // DCGM_FT_DOUBLE in the classic units: printed %f
	floatCurrent             bool
	toCurrent                float64 // multiplier classic → current units (0: 1)
	value                    func(r *gpuReading) float64
	clockEvents, xid, nvlink bool
}

// dcgmFields are the exporter's default counters, in its CSV order, plus
// the clock event reasons. Classic names and help are the exporter's;
// current (4.9) names are DCGM 4.7's field names.
var dcgmFields = []dcgmField{
	{classic: "DCGM_FI_DEV_SM_CLOCK", current: "DCGM_FI_DEV_SM_CLOCK_HERTZ", typ: "gauge",
		help: "SM clock frequency (in MHz).", helpCurrent: "SM clock frequency (in Hz).", toCurrent: 1e6,
		value: func(r *gpuReading) float64 { return r.smMHz }},
	{classic: "DCGM_FI_DEV_MEM_CLOCK", current: "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", typ: "gauge",
		help: "Memory clock frequency (in MHz).", helpCurrent: "Memory clock frequency (in Hz).", toCurrent: 1e6,
		value: func(r *gpuReading) float64 { return r.memMHz }},
	{classic: "DCGM_FI_DEV_MEMORY_TEMP", current: "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", typ: "gauge",
		help: "Memory temperature (in C).", value: func(r *gpuReading) float64 { return r.memTempC }},
	{classic: "DCGM_FI_DEV_GPU_TEMP", current: "DCGM_FI_DEV_GPU_TEMP_CELSIUS", typ: "gauge",
		help: "GPU temperature (in C).", value: func(r *gpuReading) float64 { return r.tempC }},
	{classic: "DCGM_FI_DEV_POWER_USAGE", current: "DCGM_FI_DEV_BOARD_POWER_WATTS", typ: "gauge",
		help: "Power draw (in W).", float: true, floatCurrent: true, value: func(r *gpuReading) float64 { return r.powerW }},
	{classic: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", current: "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", typ: "counter",
		help: "Total energy consumption since boot (in mJ).", helpCurrent: "Total energy consumption since boot (in J).", toCurrent: 1e-3,
		value: func(r *gpuReading) float64 { return r.energyMJ }},
	{classic: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", current: "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", typ: "counter",
		help: "Total number of PCIe retries.", value: func(r *gpuReading) float64 { return r.zero }},
	{classic: "DCGM_FI_DEV_GPU_UTIL", current: "DCGM_FI_DEV_GPU_UTIL_RATIO", typ: "gauge",
		help: "GPU utilization (in %).", helpCurrent: "GPU utilization (ratio 0-1).", toCurrent: 1e-2, floatCurrent: true,
		value: func(r *gpuReading) float64 { return math.Round(r.util * 100) }},
	{classic: "DCGM_FI_DEV_MEM_COPY_UTIL", current: "DCGM_FI_DEV_MEMORY_UTIL_RATIO", typ: "gauge",
		help: "Memory utilization (in %).", helpCurrent: "Memory utilization (ratio 0-1).", toCurrent: 1e-2, floatCurrent: true,
		value: func(r *gpuReading) float64 { return math.Round(r.memUtil * 100) }},
	{classic: "DCGM_FI_DEV_ENC_UTIL", current: "DCGM_FI_DEV_ENC_UTIL_RATIO", typ: "gauge",
		help: "Encoder utilization (in %).", helpCurrent: "Encoder utilization (ratio 0-1).", toCurrent: 1e-2, floatCurrent: true,
		value: func(r *gpuReading) float64 { return r.zero }},
	{classic: "DCGM_FI_DEV_DEC_UTIL", current: "DCGM_FI_DEV_DEC_UTIL_RATIO", typ: "gauge",
		help: "Decoder utilization (in %).", helpCurrent: "Decoder utilization (ratio 0-1).", toCurrent: 1e-2, floatCurrent: true,
		value: func(r *gpuReading) float64 { return r.zero }},
	{classic: "DCGM_FI_DEV_XID_ERRORS", current: "DCGM_FI_DEV_XID_ERROR", typ: "gauge", xid: true,
		help: "Value of the last XID error encountered.", value: func(r *gpuReading) float64 { return float64(r.xid) }},
	{classic: "DCGM_FI_DEV_FB_FREE", current: "DCGM_FI_DEV_FB_FREE_BYTES", typ: "gauge",
		help: "Framebuffer memory free (in MiB).", helpCurrent: "Framebuffer memory free (in bytes).", toCurrent: 1 << 20,
		value: func(r *gpuReading) float64 { return r.fbFree }},
	{classic: "DCGM_FI_DEV_FB_USED", current: "DCGM_FI_DEV_FB_USED_BYTES", typ: "gauge",
		help: "Framebuffer memory used (in MiB).", helpCurrent: "Framebuffer memory used (in bytes).", toCurrent: 1 << 20,
		value: func(r *gpuReading) float64 { return r.fbUsed }},
	{classic: "DCGM_FI_DEV_FB_RESERVED", current: "DCGM_FI_DEV_FB_RESERVED_BYTES", typ: "gauge",
		help: "Framebuffer memory reserved (in MiB).", helpCurrent: "Framebuffer memory reserved (in bytes).", toCurrent: 1 << 20,
		value: func(r *gpuReading) float64 { return r.fbReserved }},
	{classic: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", current: "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", typ: "counter",
		help: "Number of remapped rows for uncorrectable errors", value: func(r *gpuReading) float64 { return r.remapRows }},
	{classic: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", current: "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", typ: "counter",
		help: "Number of remapped rows for correctable errors", value: func(r *gpuReading) float64 { return r.zero }},
	{classic: "DCGM_FI_DEV_ROW_REMAP_FAILURE", current: "DCGM_FI_DEV_ROW_REMAP_FAILED", typ: "gauge",
		help: "Whether remapping of rows has failed", value: func(r *gpuReading) float64 { return r.remapFailed }},
	{classic: "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", current: "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", typ: "counter", nvlink: true,
		help: "Total number of NVLink bandwidth counters for all lanes.", value: func(r *gpuReading) float64 { return r.nvlink }},
	{classic: "DCGM_FI_DEV_VGPU_LICENSE_STATUS", current: "DCGM_FI_DEV_VGPU_LICENSE_STATUS", typ: "gauge",
		help: "vGPU License status", value: func(r *gpuReading) float64 { return r.vgpuLicenseStatus }},
	{classic: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", current: "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", typ: "gauge", float: true, floatCurrent: true,
		help: "Ratio of time the graphics engine is active.", value: func(r *gpuReading) float64 { return r.gr }},
	{classic: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", current: "DCGM_FI_PROF_TENSOR_UTIL_RATIO", typ: "gauge", float: true, floatCurrent: true,
		help: "Ratio of cycles the tensor (HMMA) pipe is active.", value: func(r *gpuReading) float64 { return r.tensor }},
	{classic: "DCGM_FI_PROF_DRAM_ACTIVE", current: "DCGM_FI_PROF_DRAM_UTIL_RATIO", typ: "gauge", float: true, floatCurrent: true,
		help: "Ratio of cycles the device memory interface is active sending or receiving data.", value: func(r *gpuReading) float64 { return r.dram }},
	{classic: "DCGM_FI_PROF_PCIE_TX_BYTES", current: "DCGM_FI_PROF_PCIE_TX_BYTES", typ: "gauge",
		help:  "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
		value: func(r *gpuReading) float64 { return r.pcieTx }},
	{classic: "DCGM_FI_PROF_PCIE_RX_BYTES", current: "DCGM_FI_PROF_PCIE_RX_BYTES", typ: "gauge",
		help:  "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
		value: func(r *gpuReading) float64 { return r.pcieRx }},
	{classic: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", current: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", typ: "gauge", clockEvents: true,
		help:  "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
		value: func(r *gpuReading) float64 { return float64(r.reasons) }},
}

func lookupDCGMField(name string) *dcgmField {
	for i := range dcgmFields {
		if f := &dcgmFields[i]; f.classic == name || f.current == name {
			return f
		}
	}
	return nil
}

// xidText is the exporter's err_msg for an XID code (its xid_errors.go,
// after NVIDIA's XID catalogue); codes not listed read "Unknown Error".
var xidText = map[int]string{
	0: "No Error", 13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
	45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
	48: "Double Bit ECC Error", 61: "Internal micro-controller breakpoint/warning", 62: "Internal micro-controller halt",
	63: "ECC page retirement or row remapping recording event", 64: "ECC page retirement or row remapper recording failure",
	74: "NVLINK Error", 79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate",
	94: "Contained ECC error", 95: "Uncontained ECC error", 119: "GSP RPC Timeout", 120: "GSP Error",
}

func xidMessage(code int) string {
	if t, ok := xidText[code]; ok {
		return t
	}
	return "Unknown Error"
}

// hgxBusIDs are an HGX H100 board's GPU PCI buses, in index order.
var hgxBusIDs = []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"}

// dcgmState is the surface's memory: energy and NVLink totals integrated
// over the sim's clock, and what a scrape prints that never changes (the
// series it reports, each GPU's identity labels). Guarded by the Sim's mu.
type dcgmState struct {
	series   []dcgmSeries
	labels   []string // per GPU: gpu, UUID, pci_bus_id, device, modelName, host, driver
	podHead  string   // the pod mapping's attributes sorting before err_code (container)
	podTail  string   // … and after err_msg (namespace, pod, pod_uid)
	energyMJ []float64
	nvlinkMB []float64
	last     time.Duration
}

// dcgmSeries is a field as the surface's generation prints it.
type dcgmSeries struct {
	head            string // HELP and TYPE lines
	name            string
	value           func(r *gpuReading) float64
	scale           float64 // to the generation's units
	float, sentinel bool
	xid             bool
}

func newDCGMState(o Options) *dcgmState {
	do := o.DCGM
	d := &dcgmState{energyMJ: make([]float64, o.TensorParallel), nvlinkMB: make([]float64, o.TensorParallel)}
	current := do.Names == DCGMNames49
	for i := range dcgmFields {
		f := &dcgmFields[i]
		if f.clockEvents && do.NoClockEvents {
			continue
		}
		sr := dcgmSeries{name: f.classic, value: f.value, scale: 1, float: f.float, xid: f.xid,
			sentinel: slices.Contains(do.Sentinels, f.classic) || slices.Contains(do.Sentinels, f.current)}
		help := f.help
		if current {
			sr.name, sr.float = f.current, f.floatCurrent
			if f.helpCurrent != "" {
				help = f.helpCurrent
			}
			if f.toCurrent != 0 {
				sr.scale = f.toCurrent
			}
		}
		sr.head = fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n", sr.name, help, sr.name, f.typ)
		d.series = append(d.series, sr)
	}
	hostLabel, driverLabel := "Hostname", "DCGM_FI_DRIVER_VERSION"
	if current {
		hostLabel, driverLabel = "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"
	}
	for g := range o.TensorParallel {
		h := fnv.New128a()
		fmt.Fprintf(h, "%s/%s/%d", do.Hostname, o.Model, g)
		b := h.Sum(nil)
		uuid := fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		d.labels = append(d.labels, fmt.Sprintf(`gpu="%d",UUID="%s",pci_bus_id="00000000:%s:00.0",device="nvidia%d",modelName="%s",%s="%s",%s="%s"`,
			g, uuid, hgxBusIDs[g], g, do.ModelName, hostLabel, do.Hostname, driverLabel, do.DriverVersion))
		d.energyMJ[g] = 2.5e9 + float64(b[0])*1e7 // since boot, days ago
	}
	if p := do.PodMapping; p != nil {
		d.podHead = attr("container", p.Container)
		d.podTail = attr("namespace", p.Namespace) + attr("pod", p.Pod) + attr("pod_uid", "")
	}
	return d
}

// attr is one label after the identity ones: `,name="value"`.
func attr(name, value string) string {
	return `,` + name + `="` + strings.ReplaceAll(value, `"`, `\"`) + `"`
}

// gpuReadings reads every GPU now, integrating energy since the last
// reading. Callers hold mu.
func (s *Sim) gpuReadings() []gpuReading {
	now := s.eng.now
	var inflight *busySpan
	if s.eng.inflight {
		inflight = new(spanOf(s.eng.stepStart, s.eng.stepEnd, s.eng.work, s.eng.cost))
	}
	u, k := s.busy.share(now, inflight)
	d := s.dcgm
	dt := (now - d.last).Seconds()
	d.last = now
	const fbTotal, fbReserved = 81559, 578
	fbUsed := math.Round(0.9 * fbTotal) // vLLM's --gpu-memory-utilization 0.9, held from start
	out := make([]gpuReading, s.opts.TensorParallel)
	for g := range out {
		c := s.gpuConditionAt(g, now)
		// Busy time draws power by how hard it works the GPU (a narrow decode
		// batch ~55% of the range, a full prefill chunk all of it) and by the
		// clock it runs at; a power cap holds the draw under the cap.
		draw := u * (0.55 + 0.45*k)
		power := gpuIdleWatts + (gpuMaxWatts-gpuIdleWatts)*draw*c.clock
		if c.powerCap {
			power = gpuIdleWatts + (powerCapWatts-gpuIdleWatts)*draw
		}
		temp := gpuAmbientC + gpuCPerWatt*power
		if c.tempFloor > 0 {
			temp = max(temp, c.tempFloor)
		}
		d.energyMJ[g] += power * dt * 1000
		if s.opts.TensorParallel > 1 {
			d.nvlinkMB[g] += u * 25000 * dt // all-reduce traffic, MB
		}
		out[g] = gpuReading{
			smMHz: math.Round(smClockMaxMHz * c.clock), memMHz: memClockMHz,
			tempC: math.Round(temp), memTempC: math.Round(temp + 3),
			powerW: power, energyMJ: math.Round(d.energyMJ[g]),
			util: u, memUtil: u * (0.55 - 0.25*k), gr: u, tensor: u * (0.2 + 0.6*k), dram: u * (0.6 - 0.2*k),
			fbFree: fbTotal - fbUsed - fbReserved, fbUsed: fbUsed, fbReserved: fbReserved,
			pcieTx: math.Round(2e5 + 6e6*u), pcieRx: math.Round(1.5e5 + 4e6*u),
			nvlink: math.Round(d.nvlinkMB[g]), reasons: c.reasons, xid: c.xid,
			remapRows: float64(c.remapRows),
		}
		if c.remapFail {
			out[g].remapFailed = 1
		}
	}
	return out
}

func (s *Sim) dcgmHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		readings := s.gpuReadings()
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriterSize(w, 32<<10)
		writeDCGM(bw, s.dcgm, readings)
		_ = bw.Flush()
	})
}

// writeDCGM writes the exposition as dcgm-exporter's template does: per
// field HELP, TYPE, then one sample per GPU with gpu, UUID, pci_bus_id,
// device, modelName, Hostname, then the label fields, then the attributes
// (err_code and err_msg on XIDs, the pod mapping's), sorted by name.
func writeDCGM(w *bufio.Writer, d *dcgmState, readings []gpuReading) {
	for _, sr := range d.series {
		w.WriteString(sr.head)
		for g := range readings {
			r := &readings[g]
			w.WriteString(sr.name + "{" + d.labels[g] + d.podHead)
			if sr.xid {
				w.WriteString(attr("err_code", strconv.Itoa(r.xid)) + attr("err_msg", xidMessage(r.xid)))
			}
			w.WriteString(d.podTail)
			v := sr.value(r) * sr.scale
			switch {
			case sr.sentinel:
				fmt.Fprintf(w, "} %s\n", DCGMSentinel)
			case sr.float:
				fmt.Fprintf(w, "} %f\n", v)
			default:
				fmt.Fprintf(w, "} %d\n", int64(math.Round(v)))
			}
		}
	}
}
