package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"time"
)

// profilerEngine is the profiler behind /start_profile and /stop_profile:
// vLLM's (profiler.go) or SGLang's (sglang_profiler.go). The engine loop
// hands it every iteration and finished request.
type profilerEngine interface {
	record(start time.Time, st *stepRecord)
	recordRequest(f FinishedRequest)
	check()
	status() ProfilerStatus
}

// newProfilerEngine is the engine's profiler: SGLang's always exists (no
// arming); vLLM's only when ProfilerDir arms it (nil otherwise, so the
// routes answer 404).
func (s *Sim) newProfilerEngine() profilerEngine {
	if s.opts.sglang() {
		return newSGLangProfiler(s)
	}
	if s.opts.ProfilerDir != "" {
		p := newProfiler(s.opts, s.Now)
		p.freeze = s.freezeEngine
		return p
	}
	return nil
}

// freezeEngine stalls the engine from the end of the iteration in flight
// until the returned release, as a profiler's blocking export on the
// engine's thread does. The stall lasts modeled (the export's modeled
// length) of simulated time, or under Run what the export took in real
// time if longer (the engine's clock follows real time there).
func (s *Sim) freezeEngine() (release func(modeled time.Duration)) {
	s.mu.Lock()
	e := s.eng
	at := s.engineNow()
	if e.inflight {
		at = max(at, e.stepEnd)
	}
	e.holdUntil = math.MaxInt64
	s.mu.Unlock()
	begun := time.Now()
	return func(modeled time.Duration) {
		s.mu.Lock()
		stall := modeled
		if s.running {
			stall = max(stall, time.Since(begun))
		}
		e.hold(at + stall)
		s.mu.Unlock()
	}
}

// engineNow is the engine's now for a stall that begins at once: under Run,
// real time since the start, which the engine's clock may lag by a few
// ticks on a loaded machine (else the engine would serve that lag inside
// the stall when it catches up); under Advance, the engine's clock.
// Callers hold mu.
func (s *Sim) engineNow() time.Duration {
	if s.running {
		return max(s.eng.now, time.Since(s.opts.Start))
	}
	return s.eng.now
}

// sglangProfilerRoutes registers SGLang's routes, GET or POST as its
// api_route does, with plain-text replies; a RuntimeError is Starlette's
// bare 500 "Internal Server Error" (the message is in the server's log and
// GET /admin/profiler's last_error), a body pydantic refuses a 400.
func (s *Sim) sglangProfilerRoutes(mux *http.ServeMux, p *sglangProfiler) {
	start := func(w http.ResponseWriter, r *http.Request) {
		req, err := readSGLangReq(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": err.Error(), "type": "Bad Request", "code": 400})
			return
		}
		if err := p.start(req, r.Context().Done()); err != nil {
			sglangInternalError(w)
			return
		}
		plainText(w, sglangStartReply)
	}
	stop := func(w http.ResponseWriter, _ *http.Request) {
		if err := p.stop(); err != nil {
			sglangInternalError(w)
			return
		}
		plainText(w, sglangStopReply)
	}
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /start_profile", start)
		mux.HandleFunc(m+" /stop_profile", stop)
	}
}

// readSGLangReq decodes an optional ProfileReqInput (no body, or JSON null:
// the defaults). Unknown fields are ignored, as the dataclass does.
func readSGLangReq(r *http.Request) (sglangReq, error) {
	var req sglangReq
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return req, err
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && !bytes.Equal(b, []byte("null")) {
		if err := json.Unmarshal(b, &req); err != nil {
			return req, errors.New("body: " + err.Error())
		}
	}
	return req, req.check()
}

// plainText is FastAPI's Response(content=...): the text, no media type.
func plainText(w http.ResponseWriter, s string) {
	w.Header()["Content-Type"] = nil
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, s)
}

// sglangInternalError is what an uncaught RuntimeError gives the caller.
func sglangInternalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, "Internal Server Error")
}
