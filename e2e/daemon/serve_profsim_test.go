package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autocapture/autocapture/vllmsim"
)

// profSim is one in-process vllmsim with its profiler armed, on its own
// loopback port and profiler folder, driven in real time. It keeps the
// wall-clock time of every /start_profile and /stop_profile it was sent, as
// the server saw them.
type profSim struct {
	Sim  *vllmsim.Sim
	Addr string // 127.0.0.1:port, the alert's instance
	Dir  string // the profiler folder (collect: dir)

	mu    sync.Mutex
	calls []profCall
}

// profCall is one profiler request, or one request a playbook step tagged
// with its alert (an `alert` query parameter): when it arrived and when it
// was answered.
type profCall struct {
	Path     string
	Alert    string // the alert query parameter, "" when none
	At, Done time.Time
}

// startProfSim starts a sim with o (ProfilerDir set to a new folder unless
// given) until the test ends.
func startProfSim(t *testing.T, o vllmsim.Options) *profSim {
	t.Helper()
	if o.ProfilerDir == "" {
		o.ProfilerDir = t.TempDir()
	}
	sim, err := vllmsim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &profSim{Sim: sim, Addr: ln.Addr().String(), Dir: o.ProfilerDir}
	srv := &http.Server{Handler: p.recordCalls(sim.Handler()), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	go func() { defer wg.Done(); _ = sim.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
		_ = sim.Close(context.Background())
	})
	return p
}

// recordCalls wraps h, noting each profiler or tagged request's arrival and
// answer.
func (p *profSim) recordCalls(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		alert := r.URL.Query().Get("alert")
		if r.URL.Path != "/start_profile" && r.URL.Path != "/stop_profile" && alert == "" {
			h.ServeHTTP(w, r)
			return
		}
		c := profCall{Path: r.URL.Path, Alert: alert, At: time.Now()}
		h.ServeHTTP(w, r)
		c.Done = time.Now()
		p.mu.Lock()
		p.calls = append(p.calls, c)
		p.mu.Unlock()
	})
}

// callsTo returns the requests to path, in order of arrival.
func (p *profSim) callsTo(path string) []profCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []profCall
	for _, c := range p.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// taggedCalls counts the requests tagged with an alert, by alert and path.
func (p *profSim) taggedCalls() map[string]map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]map[string]int{}
	for _, c := range p.calls {
		if c.Alert == "" {
			continue
		}
		if out[c.Alert] == nil {
			out[c.Alert] = map[string]int{}
		}
		out[c.Alert][c.Path]++
	}
	return out
}

// admin reads GET /admin/profiler over HTTP, as an operator would.
func (p *profSim) admin(t *testing.T) vllmsim.ProfilerStatus {
	t.Helper()
	resp, err := http.Get("http://" + p.Addr + "/admin/profiler")
	if err != nil {
		t.Fatalf("sim %s: /admin/profiler: %v", p.Addr, err)
	}
	defer resp.Body.Close()
	var st vllmsim.ProfilerStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("sim %s: /admin/profiler: %v", p.Addr, err)
	}
	return st
}

// violations sums the protocol violations of every kind and names the
// non-zero ones ("" when there are none).
func violations(st vllmsim.ProfilerStatus) (int, string) {
	n := 0
	var kinds []string
	for k, v := range st.Violations {
		n += v
		if v != 0 {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(kinds)
	return n, strings.Join(kinds, " ")
}

// checkClean fails the test unless the sim's profiler is armed, idle (nothing
// recording or flushing), has no files still to write, and counts no
// violation of any kind.
func checkClean(t *testing.T, p *profSim) vllmsim.ProfilerStatus {
	t.Helper()
	st := p.admin(t)
	for _, k := range []string{vllmsim.ViolationStartWhileRecording, vllmsim.ViolationStopWhileIdle,
		vllmsim.ViolationRecordingPastLimit, vllmsim.ViolationStartWhileFlushing} {
		if _, ok := st.Violations[k]; !ok {
			t.Errorf("sim %s: /admin/profiler lacks the violation kind %s: %+v", p.Addr, k, st.Violations)
		}
	}
	if n, kinds := violations(st); n != 0 {
		t.Errorf("sim %s: %d profiler violations: %s", p.Addr, n, kinds)
	}
	if !st.Armed || st.State != "idle" || st.PendingWrites != 0 {
		t.Errorf("sim %s: profiler armed=%v state %q pending_writes %d, want armed, idle, none pending",
			p.Addr, st.Armed, st.State, st.PendingWrites)
	}
	return st
}

// recordings pairs the sim's starts with its stops: each interval runs from
// a start's arrival to the answer of the stop after it (an over-estimate of
// the recording, flush included); an unmatched start runs to now.
func (p *profSim) recordings() [][2]time.Time {
	starts, stops := p.callsTo("/start_profile"), p.callsTo("/stop_profile")
	var out [][2]time.Time
	j := 0
	for _, s := range starts {
		for j < len(stops) && stops[j].At.Before(s.At) {
			j++
		}
		end := time.Now()
		if j < len(stops) {
			end = stops[j].Done
			j++
		}
		out = append(out, [2]time.Time{s.At, end})
	}
	return out
}

// maxOverlap is the most intervals that hold at one instant.
func maxOverlap(iv [][2]time.Time) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, i := range iv {
		es = append(es, edge{i[0], 1}, edge{i[1], -1})
	}
	sort.Slice(es, func(a, b int) bool {
		if es[a].at.Equal(es[b].at) {
			return es[a].d < es[b].d // an end before a start at the same instant
		}
		return es[a].at.Before(es[b].at)
	})
	n, top := 0, 0
	for _, e := range es {
		n += e.d
		top = max(top, n)
	}
	return top
}

// profileAlert is one firing alert on instance with the sim's profiler
// folder as a label (the playbook collects from it).
func profileAlert(alertname, fingerprint string, sim *profSim, startsAt time.Time) string {
	return fmt.Sprintf(`{"status":"firing","labels":{"alertname":%q,"instance":%q,"profiler_dir":%q},`+
		`"annotations":{},"startsAt":%q,"endsAt":"0001-01-01T00:00:00Z","fingerprint":%q}`,
		alertname, sim.Addr, sim.Dir, startsAt.UTC().Format(time.RFC3339Nano), fingerprint)
}

// alertsBody is one webhook (one Alertmanager group) of the alerts given.
func alertsBody(alerts ...string) []byte {
	return []byte(`{"version":"4","groupKey":"{}:{}","status":"firing","receiver":"autocapture","alerts":[` +
		strings.Join(alerts, ",") + `]}`)
}

// profilePlaybook profiles the instance of the alerts named alertname (a
// regular expression) for frame, collecting from the folder the alert's
// profiler_dir label names: no `when` gate, no cooldown.
func profilePlaybook(alertname string, frame time.Duration) string {
	return fmt.Sprintf(`playbooks:
  - name: ha-profile
    match:
      - alertname=~"%s"
    steps:
      - id: profile
        timeout: 2m
        profile:
          duration: %s
          stop_timeout: 30s
          collect: {dir: '{{ .Labels.profiler_dir }}'}
`, alertname, frame)
}
