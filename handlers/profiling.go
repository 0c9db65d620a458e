package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
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

// profilingRoutes registers the tier-3 routes on the API group (its auth).
func (s *Server) profilingRoutes(api *gin.RouterGroup) {
	api.GET("/profiling", s.profilingStatus)
	api.POST("/profiling/pause", s.pauseProfiling)
	api.POST("/profiling/resume", s.resumeProfiling)
	api.DELETE("/profiling/leases", s.clearProfileLease)
	api.POST("/runs/:id/stop-profile", s.stopProfile)
	api.GET("/runs/:id/profile", s.runProfile)
}

// actor names who made a request, for the audit: the subject CN of its
// verified TLS client certificate, else the basic-auth user when that is how
// it authenticated, else its remote address (a bearer token is shared, it
// names nobody).
func (s *Server) actor(c *gin.Context) string {
	if cn := clientCN(c.Request); cn != "" {
		return clip.String(cn, 80)
	}
	if s.auth.enabled && s.auth.user != nil {
		if u, _, ok := c.Request.BasicAuth(); ok && u != "" {
			return clip.String(u, 80)
		}
	}
	return c.ClientIP()
}

// profilingStatus serves GET /api/v1/profiling.
func (s *Server) profilingStatus(c *gin.Context) {
	st, err := s.opts.Profiling.ProfilingStatus(c.Request.Context())
	if err != nil {
		s.profilingError(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

// pauseProfiling serves POST /api/v1/profiling/pause {"reason": "..."}.
func (s *Server) pauseProfiling(c *gin.Context) {
	var body struct {
		Reason string `json:"reason"`
	}
	raw, err := io.ReadAll(io.LimitReader(c.Request.Body, maxPauseBody+1))
	if err != nil || len(raw) > maxPauseBody {
		fail(c, http.StatusBadRequest, "bad_body", "want a JSON body of at most 64 KiB: {\"reason\": \"...\"}")
		return
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || strings.TrimSpace(body.Reason) == "" {
		fail(c, http.StatusBadRequest, "bad_body", `want {"reason": "..."} with a reason people will read in every refusal`)
		return
	}
	by, reason := s.actor(c), clip.Line(strings.TrimSpace(body.Reason), 500)
	st, err := s.opts.Profiling.PauseProfiling(c.Request.Context(), by, reason)
	if err != nil {
		s.profilingError(c, err)
		return
	}
	s.log.Warn("Profiling paused through the API.", zap.String("by", by), zap.String("remote", c.ClientIP()), zap.String("reason", reason))
	c.JSON(http.StatusOK, st)
}

// resumeProfiling serves POST /api/v1/profiling/resume.
func (s *Server) resumeProfiling(c *gin.Context) {
	by := s.actor(c)
	st, err := s.opts.Profiling.ResumeProfiling(c.Request.Context(), by)
	if err != nil {
		s.profilingError(c, err)
		return
	}
	s.log.Warn("Profiling resumed through the API.", zap.String("by", by), zap.String("remote", c.ClientIP()))
	c.JSON(http.StatusOK, st)
}

// stopProfile serves POST /api/v1/runs/{id}/stop-profile: 404 unknown run,
// 409 no capture recording for it.
func (s *Server) stopProfile(c *gin.Context) {
	id, by := c.Param("id"), s.actor(c)
	l, err := s.opts.Profiling.StopProfile(c.Request.Context(), id, by)
	if err != nil {
		s.profilingError(c, err)
		return
	}
	s.log.Warn("A capture's stop was requested through the API.", zap.String("run", id), zap.String("target", l.Target),
		zap.String("by", by), zap.String("remote", c.ClientIP()))
	c.JSON(http.StatusOK, l)
}

// clearProfileLease serves DELETE /api/v1/profiling/leases?target=: 404 when
// nothing holds the target, 409 when its lease is live (not stop_failed).
func (s *Server) clearProfileLease(c *gin.Context) {
	target, by := c.Query("target"), s.actor(c)
	if target == "" {
		fail(c, http.StatusBadRequest, "bad_query", "target is required (the leased base URL, as GET /api/v1/profiling shows it)")
		return
	}
	l, err := s.opts.Profiling.ClearProfileLease(c.Request.Context(), target, by)
	if err != nil {
		s.profilingError(c, err)
		return
	}
	s.log.Warn("A stuck profile lease was cleared through the API.", zap.String("target", l.Target), zap.String("run", l.RunID),
		zap.String("by", by), zap.String("remote", c.ClientIP()))
	c.JSON(http.StatusOK, l)
}

// runProfile serves GET /api/v1/runs/{id}/profile.
func (s *Server) runProfile(c *gin.Context) {
	p, err := s.opts.Profiling.RunProfile(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.profilingError(c, err)
		return
	}
	c.JSON(http.StatusOK, p)
}

// profilingError maps the profiling errors to codes, the rest as runError.
func (s *Server) profilingError(c *gin.Context, err error) {
	switch {
	case errors.Is(err, runs.ErrNoCapture):
		fail(c, http.StatusConflict, "no_capture", "run "+strconv.Quote(clip.String(c.Param("id"), 80))+" has no capture recording")
	case errors.Is(err, runs.ErrNotStuck):
		fail(c, http.StatusConflict, "not_stuck", err.Error())
	case errors.Is(err, runs.ErrNoLease):
		fail(c, http.StatusNotFound, "not_found", err.Error())
	default:
		s.runError(c, c.Param("id"), err)
	}
}
