package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// routes builds the handler: vLLM's routes, the profiler's when armed, and
// the sim's own /admin/ routes for tests.
func (s *Sim) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(s.metrics.reg))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": s.opts.Version})
	})
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.profilerRoutes(mux)
	mux.HandleFunc("GET /admin/scenario", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.scenarioReport())
	})
	mux.HandleFunc("POST /admin/scenario", s.handleSetScenario)
	mux.HandleFunc("GET /admin/requests", s.handleRequests)
	mux.HandleFunc("GET /admin/profiler", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Profiler())
	})
	mux.HandleFunc("POST /admin/profiler/faults", s.handleProfilerFaults)
	mux.HandleFunc("GET /admin/gpu", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.GPUFaults())
	})
	mux.HandleFunc("POST /admin/gpu/faults", s.handleGPUFaults)
	return mux
}

func (s *Sim) handleModels(w http.ResponseWriter, _ *http.Request) {
	created := s.opts.Start.Unix()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.Model, "object": "model", "created": created, "owned_by": "vllm",
			"root": s.opts.Model, "parent": nil, "max_model_len": s.opts.EngineConfig.MaxModelLen,
			"permission": []map[string]any{{
				"id": "modelperm-sim", "object": "model_permission", "created": created,
				"allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
				"allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
				"organization": "*", "group": nil, "is_blocking": false,
			}},
		}},
	})
}

// scenarioReport is GET /admin/scenario: the state now and what can be set.
type scenarioReport struct {
	State
	Scenarios    []string `json:"scenarios"`
	GPUScenarios []string `json:"gpu_scenarios"`
}

func (s *Sim) scenarioReport() scenarioReport {
	return scenarioReport{State: s.State(), Scenarios: Scenarios(), GPUScenarios: GPUScenarios()}
}

// scenarioRequest is POST /admin/scenario's body (unknown fields are
// refused). Scenario and/or Shape make a Change, applied now or After a
// delay. Load and Concurrency, when present, replace the overrides now (0:
// the scenario's own, load -1: no load); they cannot be delayed (use
// shape.rps and shape.concurrency with after).
type scenarioRequest struct {
	Scenario    string    `json:"scenario"`
	After       *Duration `json:"after"`
	Shape       *Shape    `json:"shape"`
	Load        *float64  `json:"load"`
	Concurrency *int      `json:"concurrency"`
}

func (s *Sim) handleSetScenario(w http.ResponseWriter, r *http.Request) {
	req, err := readScenarioRequest(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if req.Scenario != "" || req.Shape != nil {
		c := Change{Scenario: req.Scenario, Shape: req.Shape}
		if req.After != nil {
			c.After = time.Duration(*req.After)
		}
		if err := s.ShiftTo(c); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
	}
	if req.Load != nil || req.Concurrency != nil {
		s.setLoad(req.Load, req.Concurrency)
	}
	writeJSON(w, http.StatusOK, s.scenarioReport())
}

// readScenarioRequest decodes and checks POST /admin/scenario: one JSON
// object, no unknown field, ?name= agreeing with "scenario".
func readScenarioRequest(r *http.Request) (scenarioRequest, error) {
	var req scenarioRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return req, fmt.Errorf("body: %w", err)
	}
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return req, fmt.Errorf("body: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return req, errors.New("body: more than one JSON value")
		}
	}
	if name := r.URL.Query().Get("name"); name != "" {
		if req.Scenario != "" && req.Scenario != name {
			return req, fmt.Errorf("?name=%s and scenario %q disagree", name, req.Scenario)
		}
		req.Scenario = name
	}
	switch {
	case req.Load != nil && *req.Load < 0 && *req.Load != NoLoad:
		return req, errors.New("load: want a rate >= 0 or -1 for none")
	case req.Concurrency != nil && *req.Concurrency < 0:
		return req, errors.New("concurrency: want a count >= 0 (0: the scenario's)")
	case req.After != nil && (req.Load != nil || req.Concurrency != nil):
		return req, errors.New("load and concurrency apply now: with after, set shape.rps and shape.concurrency")
	case req.After != nil && req.Scenario == "" && req.Shape == nil:
		return req, errors.New("after: nothing to shift (no scenario, no shape)")
	case req.Scenario == "" && req.Shape == nil && req.Load == nil && req.Concurrency == nil:
		return req, errors.New("nothing to change: set scenario, shape, load or concurrency (GET reads the state)")
	}
	return req, nil
}

// handleRequests is GET /admin/requests: the finished requests, oldest
// first; ?since=RFC3339 keeps those finished after it, ?limit=N the last N.
func (s *Sim) handleRequests(w http.ResponseWriter, r *http.Request) {
	reqs := s.Requests()
	q := r.URL.Query()
	if v := q.Get("since"); v != "" {
		since, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("since: %v", err)})
			return
		}
		i := 0
		for i < len(reqs) && !reqs[i].Finished.After(since) {
			i++
		}
		reqs = reqs[i:]
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit: want a count"})
			return
		}
		reqs = reqs[max(0, len(reqs)-n):]
	}
	writeJSON(w, http.StatusOK, reqs)
}

// apiError writes an error in the OpenAI shape vLLM uses.
func apiError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{
		"object": "error", "message": msg, "type": typ, "param": nil, "code": status,
	})
}

// decodeBody reads a JSON request body of at most 8 MiB.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("request body over %d bytes", tooBig.Limit)
		}
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}
