package handlers

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/clip"
	"github.com/autocapture/autocapture/internal/untrusted"
	"github.com/autocapture/autocapture/runner/runs"
	"github.com/autocapture/autocapture/vocab"
)

// Paging bounds of GET /api/v1/runs.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// listRuns serves GET /api/v1/runs?alertname=&status=&limit=&cursor=, newest first.
func (s *Server) listRuns(c *gin.Context) {
	q, msg := s.listQuery(c)
	if msg != "" {
		fail(c, http.StatusBadRequest, "bad_query", msg)
		return
	}
	page, err := s.opts.Runs.List(c.Request.Context(), q)
	if err != nil {
		s.runError(c, "", err)
		return
	}
	if page.Runs == nil {
		page.Runs = []runs.Run{}
	}
	page.Runs = boundedRuns(page.Runs)
	c.JSON(http.StatusOK, page)
}

// listQuery reads the query of GET /api/v1/runs and of GET /runs; a
// non-empty string says what is wrong.
func (s *Server) listQuery(c *gin.Context) (runs.ListQuery, string) {
	q := runs.ListQuery{Alertname: c.Query("alertname"), Limit: DefaultListLimit, Cursor: c.Query("cursor")}
	if st := c.Query("status"); st != "" {
		var err error
		if q.Status, err = vocab.ParseRunStatus(st); err != nil {
			return q, err.Error()
		}
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, "limit must be an integer from 1 to " + strconv.Itoa(MaxListLimit)
		}
		q.Limit = n
	}
	return q, ""
}

// boundedRuns is a page of the run list with every label and annotation
// clipped: JSON escapes the rest.
func boundedRuns(rs []runs.Run) []runs.Run {
	for i := range rs {
		rs[i].Alertname = untrusted.Clip(rs[i].Alertname)
		rs[i].Labels, rs[i].Annotations = untrusted.ClipKV(rs[i].Labels), untrusted.ClipKV(rs[i].Annotations)
	}
	return rs
}

// getRun serves GET /api/v1/runs/{id}.
func (s *Server) getRun(c *gin.Context) {
	id := c.Param("id")
	run, err := s.opts.Runs.Get(c.Request.Context(), id)
	if err != nil {
		s.runError(c, id, err)
		return
	}
	c.JSON(http.StatusOK, run)
}

// cancelRun serves POST /api/v1/runs/{id}/cancel: 404 unknown, 409 finished.
func (s *Server) cancelRun(c *gin.Context) {
	id := c.Param("id")
	run, err := s.opts.Runs.Cancel(c.Request.Context(), id)
	if err != nil {
		s.runError(c, id, err)
		return
	}
	s.log.Info("Run cancellation requested.", zap.String("run", id), zap.String("remote", c.ClientIP()))
	c.JSON(http.StatusOK, run)
}

// runError maps the run service's errors to codes: 404, 409, 400, else 503
// (the store is what fails; the caller may retry).
func (s *Server) runError(c *gin.Context, id string, err error) {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		fail(c, http.StatusNotFound, "not_found", "no run "+strconv.Quote(clip.String(id, 80)))
	case errors.Is(err, runs.ErrFinished):
		fail(c, http.StatusConflict, "finished", "run "+strconv.Quote(clip.String(id, 80))+" has already finished")
	case errors.Is(err, runs.ErrBadCursor):
		fail(c, http.StatusBadRequest, "bad_query", err.Error())
	default:
		s.log.Error("Run store request failed.", zap.String("path", c.Request.URL.Path), zap.Error(err))
		fail(c, http.StatusServiceUnavailable, "store_unavailable", err.Error())
	}
}
