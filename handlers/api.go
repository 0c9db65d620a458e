package handlers

import (
	"errors"
	"net/http"
	"strconv"

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
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	q, msg := s.listQuery(r)
	if msg != "" {
		fail(w, http.StatusBadRequest, "bad_query", msg)
		return
	}
	page, err := s.opts.Runs.List(r.Context(), q)
	if err != nil {
		s.runError(w, r, "", err)
		return
	}
	if page.Runs == nil {
		page.Runs = []runs.Run{}
	}
	page.Runs = boundedRuns(page.Runs)
	writeJSON(w, http.StatusOK, page)
}

// listQuery reads the query of GET /api/v1/runs and of GET /runs; a
// non-empty string says what is wrong.
func (s *Server) listQuery(r *http.Request) (runs.ListQuery, string) {
	query := r.URL.Query()
	q := runs.ListQuery{Alertname: query.Get("alertname"), Limit: DefaultListLimit, Cursor: query.Get("cursor")}
	if st := query.Get("status"); st != "" {
		var err error
		if q.Status, err = vocab.ParseRunStatus(st); err != nil {
			return q, err.Error()
		}
	}
	if l := query.Get("limit"); l != "" {
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
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, err := s.opts.Runs.Get(r.Context(), id)
	if err != nil {
		s.runError(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// cancelRun serves POST /api/v1/runs/{id}/cancel: 404 unknown, 409 finished.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	run, err := s.opts.Runs.Cancel(r.Context(), id)
	if err != nil {
		s.runError(w, r, id, err)
		return
	}
	s.log.Info("Run cancellation requested.", zap.String("run", id), zap.String("remote", clientIP(r)))
	writeJSON(w, http.StatusOK, run)
}

// runError maps the run service's errors to codes: 404, 409, 400, else 503
// (the store is what fails; the caller may retry).
func (s *Server) runError(w http.ResponseWriter, r *http.Request, id string, err error) {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		fail(w, http.StatusNotFound, "not_found", "no run "+strconv.Quote(clip.String(id, 80)))
	case errors.Is(err, runs.ErrFinished):
		fail(w, http.StatusConflict, "finished", "run "+strconv.Quote(clip.String(id, 80))+" has already finished")
	case errors.Is(err, runs.ErrBadCursor):
		fail(w, http.StatusBadRequest, "bad_query", err.Error())
	default:
		s.log.Error("Run store request failed.", zap.String("path", r.URL.Path), zap.Error(err))
		fail(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
	}
}
