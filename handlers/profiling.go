package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/runner/runs"
)

// Profiling is what tier 3's kill switches need of the profiling control
// plane (*profiling.Plane, the run service's Profiling()): the fleet-wide
// pause, a stop of one run's capture, the clear of a lease whose stop
// failed. Every call names who asked.
type Profiling interface {
	// ProfilingStatus is the pause, the leases held and the budget used.
	ProfilingStatus(ctx context.Context) (runs.ProfilingStatus, error)
	// PauseProfiling stops every replica from starting a capture.
	PauseProfiling(ctx context.Context, by, reason string) (runs.ProfilingStatus, error)
	// ResumeProfiling lifts the pause.
	ResumeProfiling(ctx context.Context, by string) (runs.ProfilingStatus, error)
	// StopProfile asks the run's capture to stop now; errors wrap
	// runs.ErrNotFound or runs.ErrNoCapture.
	StopProfile(ctx context.Context, runID, by string) (runs.ProfileLease, error)
	// ClearProfileLease releases a target whose stop failed; errors wrap
	// runs.ErrNoLease or runs.ErrNotStuck.
	ClearProfileLease(ctx context.Context, target, by string) (runs.ProfileLease, error)
	// RunProfile is the run's lease and capture events; errors wrap runs.ErrNotFound.
	RunProfile(ctx context.Context, runID string) (runs.RunProfile, error)
}

// maxPauseBody bounds POST /api/v1/profiling/pause's body.
const maxPauseBody = 64 << 10

// profilingRoutes registers the tier-3 routes through api (the API's auth).
func (s *Server) profilingRoutes(api func(pattern string, h http.HandlerFunc)) {
	api("GET /api/v1/profiling", s.profilingStatus)
	api("POST /api/v1/profiling/pause", s.pauseProfiling)
	api("POST /api/v1/profiling/resume", s.resumeProfiling)
	api("DELETE /api/v1/profiling/leases", s.clearProfileLease)
	api("POST /api/v1/runs/{id}/stop-profile", s.stopProfile)
	api("GET /api/v1/runs/{id}/profile", s.runProfile)
}

// actor names who made a request, for the audit: the subject CN of its
// verified TLS client certificate, else the basic-auth user when that is how
// it authenticated, else its remote address (a bearer token is shared, it
// names nobody).
func (s *Server) actor(r *http.Request) string {
	if cn := clientCN(r); cn != "" {
		return clip.String(cn, 80)
	}
	if s.auth.enabled && s.auth.user != nil {
		if u, _, ok := r.BasicAuth(); ok && u != "" {
			return clip.String(u, 80)
		}
	}
	return clientIP(r)
}

// profilingStatus serves GET /api/v1/profiling.
func (s *Server) profilingStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.opts.Profiling.ProfilingStatus(r.Context())
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// pauseProfiling serves POST /api/v1/profiling/pause {"reason": "..."}.
func (s *Server) pauseProfiling(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxPauseBody+1))
	if err != nil || len(raw) > maxPauseBody {
		fail(w, http.StatusBadRequest, "bad_body", "want a JSON body of at most 64 KiB: {\"reason\": \"...\"}")
		return
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || strings.TrimSpace(body.Reason) == "" {
		fail(w, http.StatusBadRequest, "bad_body", `want {"reason": "..."} with a reason people will read in every refusal`)
		return
	}
	by, reason := s.actor(r), clip.Line(strings.TrimSpace(body.Reason), 500)
	st, err := s.opts.Profiling.PauseProfiling(r.Context(), by, reason)
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	s.log.Warn("Profiling paused through the API.", zap.String("by", by), zap.String("remote", clientIP(r)), zap.String("reason", reason))
	writeJSON(w, http.StatusOK, st)
}

// resumeProfiling serves POST /api/v1/profiling/resume.
func (s *Server) resumeProfiling(w http.ResponseWriter, r *http.Request) {
	by := s.actor(r)
	st, err := s.opts.Profiling.ResumeProfiling(r.Context(), by)
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	s.log.Warn("Profiling resumed through the API.", zap.String("by", by), zap.String("remote", clientIP(r)))
	writeJSON(w, http.StatusOK, st)
}

// stopProfile serves POST /api/v1/runs/{id}/stop-profile: 404 unknown run,
// 409 no capture recording for it.
func (s *Server) stopProfile(w http.ResponseWriter, r *http.Request) {
	id, by := r.PathValue("id"), s.actor(r)
	l, err := s.opts.Profiling.StopProfile(r.Context(), id, by)
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	s.log.Warn("A capture's stop was requested through the API.", zap.String("run", id), zap.String("target", l.Target),
		zap.String("by", by), zap.String("remote", clientIP(r)))
	writeJSON(w, http.StatusOK, l)
}

// clearProfileLease serves DELETE /api/v1/profiling/leases?target=: 404 when
// nothing holds the target, 409 when its lease is live (not stop_failed).
func (s *Server) clearProfileLease(w http.ResponseWriter, r *http.Request) {
	target, by := r.URL.Query().Get("target"), s.actor(r)
	if target == "" {
		fail(w, http.StatusBadRequest, "bad_query", "target is required (the leased base URL, as GET /api/v1/profiling shows it)")
		return
	}
	l, err := s.opts.Profiling.ClearProfileLease(r.Context(), target, by)
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	s.log.Warn("A stuck profile lease was cleared through the API.", zap.String("target", l.Target), zap.String("run", l.RunID),
		zap.String("by", by), zap.String("remote", clientIP(r)))
	writeJSON(w, http.StatusOK, l)
}

// runProfile serves GET /api/v1/runs/{id}/profile.
func (s *Server) runProfile(w http.ResponseWriter, r *http.Request) {
	p, err := s.opts.Profiling.RunProfile(r.Context(), r.PathValue("id"))
	if err != nil {
		s.profilingError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// profilingError maps the profiling errors to codes, the rest as runError.
func (s *Server) profilingError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, runs.ErrNoCapture):
		fail(w, http.StatusConflict, "no_capture", "run "+strconv.Quote(clip.String(r.PathValue("id"), 80))+" has no capture recording")
	case errors.Is(err, runs.ErrNotStuck):
		fail(w, http.StatusConflict, "not_stuck", err.Error())
	case errors.Is(err, runs.ErrNoLease):
		fail(w, http.StatusNotFound, "not_found", err.Error())
	default:
		s.runError(w, r, r.PathValue("id"), err)
	}
}
