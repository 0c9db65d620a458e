package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Modes of a start that arrives while a stop is flushing.
const (
	StartWhileFlushingWait   = "wait"   // takes effect once the flush is over (the engine is busy until then)
	StartWhileFlushingIgnore = "ignore" // answered 200 and dropped: nothing records
)

// ProfilerFaults are profiler misbehaviours seen in real vLLM, injected on
// demand so that a client's handling of them can be tested.
type ProfilerFaults struct {
	// StopHang makes /stop_profile block this much longer before it
	// flushes (vLLM has hung > 20 min on stop_profile at TP=2, vllm#22748);
	// the state stays "flushing" meanwhile.
	StopHang time.Duration
	// StartWhileFlushing is "wait" (the default) or "ignore": a start during
	// a flush is counted as start_while_flushing either way.
	StartWhileFlushing string
	// LateFiles writes the trace files this long after /stop_profile has
	// returned (exporting off the request path, as vLLM PR #51816 does):
	// the profiler is idle and the files are not there yet.
	LateFiles time.Duration
}

// profilerFaultsJSON is the wire form: durations as Go duration strings.
type profilerFaultsJSON struct {
	StopHang           string `json:"stop_hang"`
	StartWhileFlushing string `json:"start_while_flushing"`
	LateFiles          string `json:"late_files"`
}

// MarshalJSON writes durations as strings ("30s").
func (f ProfilerFaults) MarshalJSON() ([]byte, error) {
	mode := f.StartWhileFlushing
	if mode == "" {
		mode = StartWhileFlushingWait
	}
	return json.Marshal(profilerFaultsJSON{StopHang: f.StopHang.String(), StartWhileFlushing: mode, LateFiles: f.LateFiles.String()})
}

// UnmarshalJSON reads the wire form strictly: unknown fields and bad
// durations are errors; absent fields are zero.
func (f *ProfilerFaults) UnmarshalJSON(b []byte) error {
	var w profilerFaultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("profiler faults: %w", err)
	}
	var out ProfilerFaults
	for _, d := range []struct {
		name string
		s    string
		to   *time.Duration
	}{{"stop_hang", w.StopHang, &out.StopHang}, {"late_files", w.LateFiles, &out.LateFiles}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("profiler faults: %s: %w", d.name, err)
		}
		*d.to = v
	}
	out.StartWhileFlushing = w.StartWhileFlushing
	if err := out.validate(); err != nil {
		return err
	}
	*f = out
	return nil
}

func (f ProfilerFaults) validate() error {
	switch f.StartWhileFlushing {
	case "", StartWhileFlushingWait, StartWhileFlushingIgnore:
	default:
		return fmt.Errorf("profiler faults: start_while_flushing %q: want %s or %s", f.StartWhileFlushing,
			StartWhileFlushingWait, StartWhileFlushingIgnore)
	}
	if f.StopHang < 0 || f.LateFiles < 0 {
		return fmt.Errorf("profiler faults: stop_hang %v, late_files %v: want >= 0", f.StopHang, f.LateFiles)
	}
	return nil
}

// SetProfilerFaults replaces the injected profiler faults; a stop already
// under way keeps the faults it started with.
func (s *Sim) SetProfilerFaults(f ProfilerFaults) error {
	if err := f.validate(); err != nil {
		return err
	}
	prof, ok := s.prof.(*profiler)
	if !ok {
		return fmt.Errorf("profiler faults: the profiler is not armed (or not vLLM's)")
	}
	prof.mu.Lock()
	prof.faults = f
	prof.mu.Unlock()
	return nil
}

// handleProfilerFaults is POST /admin/profiler/faults: a JSON body of
// ProfilerFaults replaces them all (absent fields: no fault); the answer is
// the faults now in force.
func (s *Sim) handleProfilerFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var f ProfilerFaults
	if err := json.Unmarshal(body, &f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := s.SetProfilerFaults(f); err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, f)
}
