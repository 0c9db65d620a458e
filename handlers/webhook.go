package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/runner/runs"
)

// AlertResult is one alert's line in the webhook's answer.
type AlertResult struct {
	Index       int          `json:"index"`
	Fingerprint string       `json:"fingerprint,omitempty"`
	Alertname   string       `json:"alertname,omitempty"`
	Outcome     runs.Outcome `json:"outcome"`
	RunID       string       `json:"run_id,omitempty"`
	// Reason and Detail are set for rejected alerts.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// WebhookResponse is the 200 answer: one result per alert of the body, in order.
type WebhookResponse struct {
	Status string        `json:"status"`
	Alerts []AlertResult `json:"alerts"`
}

// webhook takes one Alertmanager notification: read under the size cap, decode,
// store the valid alerts in one transaction, answer each alert's outcome.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	p, err := Decode(body)
	if err != nil {
		be, _ := IsBodyError(err)
		s.log.Warn("Webhook refused: body unusable.", zap.String("error", be.Code), zap.String("reason", be.Msg))
		fail(w, http.StatusBadRequest, be.Code, be.Msg)
		return
	}
	log := s.log.With(zap.String("group_key", p.Message.GroupKey), zap.String("receiver", p.Message.Receiver))
	for _, w := range p.Warnings {
		log.Warn("Webhook envelope field ignored.", zap.String("why", w))
	}
	results := make([]AlertResult, len(p.Valid)+len(p.Rejected))
	for _, r := range p.Rejected {
		log.Warn("Alert rejected.", zap.Int("index", r.Index), zap.String("reason", r.Reason),
			zap.String("detail", r.Detail), zap.String("fingerprint", r.Fingerprint), zap.String("alertname", r.Alertname))
		s.metrics.rejected.WithLabelValues(r.Reason).Inc()
		s.metrics.alerts.WithLabelValues(string(OutcomeRejected)).Inc()
		results[r.Index] = AlertResult{Index: r.Index, Fingerprint: r.Fingerprint, Alertname: r.Alertname,
			Outcome: OutcomeRejected, Reason: r.Reason, Detail: r.Detail}
	}
	if len(p.Valid) > 0 {
		acks, err := s.accept(r.Context(), p)
		if err != nil {
			log.Error("Webhook not stored: the run store failed; Alertmanager will retry.", zap.Error(err))
			fail(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		for i, ack := range acks {
			a := p.Message.Alerts[i]
			idx := p.Valid[i]
			s.metrics.alerts.WithLabelValues(string(ack.Outcome)).Inc()
			results[idx] = AlertResult{Index: idx, Fingerprint: a.Fingerprint, Alertname: a.Labels["alertname"],
				Outcome: ack.Outcome, RunID: ack.RunID}
			log.Debug("Alert taken.", zap.String("fingerprint", a.Fingerprint), zap.String("outcome", string(ack.Outcome)),
				zap.String("run", ack.RunID))
		}
	}
	writeJSON(w, http.StatusOK, WebhookResponse{Status: "ok", Alerts: results})
}

// CodeNotJSONType is the 415 answer's word for a body not declared as JSON.
const CodeNotJSONType = "unsupported_media_type"

// requireJSON refuses a webhook whose Content-Type is not application/json
// (parameters such as charset allowed). A browser sends text/plain, form or
// multipart cross-site without a preflight, so with no token on loopback any
// page could start runs; Alertmanager always declares application/json, so a
// missing type is refused too.
func (s *Server) requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		mt, _, err := mime.ParseMediaType(ct)
		if err == nil && mt == "application/json" {
			next.ServeHTTP(w, r)
			return
		}
		got := "no Content-Type"
		if ct != "" {
			got = "Content-Type " + strconv.Quote(ct)
		}
		s.log.Warn("Webhook refused: not declared as JSON.", zap.String("content_type", ct))
		fail(w, http.StatusUnsupportedMediaType, CodeNotJSONType,
			got+": the webhook takes Alertmanager's body, sent as Content-Type application/json")
	})
}

// refuseCrossOrigin answers 403 to a state-changing request a browser sends
// from another origin (Sec-Fetch-Site, else Origin against Host): with no
// token on loopback a web page could otherwise cancel runs or reload.
// Clients that are not browsers (Alertmanager, Slack, curl) send neither.
func (s *Server) refuseCrossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cop.Check(r); err != nil {
			s.log.Warn("Request refused: cross-origin from a browser.", zap.String("path", r.URL.Path),
				zap.String("origin", r.Header.Get("Origin")), zap.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")))
			fail(w, http.StatusForbidden, "cross_origin",
				r.Method+" from another origin in a browser is refused: "+err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// accept hands the valid alerts to the run service under AcceptTimeout and
// checks it answered once per alert.
func (s *Server) accept(ctx context.Context, p *Payload) ([]runs.Accepted, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.AcceptTimeout)
	defer cancel()
	acks, err := s.opts.Runs.Accept(ctx, p.Message.Alerts)
	if err != nil {
		return nil, fmt.Errorf("storing %d alerts: %w", len(p.Message.Alerts), err)
	}
	if len(acks) != len(p.Message.Alerts) {
		return nil, fmt.Errorf("storing alerts: run service answered %d outcomes for %d alerts", len(acks), len(p.Message.Alerts))
	}
	return acks, nil
}

// readBody reads a webhook body under MaxBodyBytes, answering 413 beyond it.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	return s.readLimited(w, r, s.opts.MaxBodyBytes, "web.max_body_bytes")
}

// readLimited reads the request body under max bytes, answering 413 beyond
// it (setting names the limit in the answer).
func (s *Server) readLimited(w http.ResponseWriter, r *http.Request, max int64, setting string) ([]byte, bool) {
	if r.ContentLength > max {
		s.tooLarge(w, r, r.ContentLength, max, setting)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.tooLarge(w, r, -1, max, setting)
			return nil, false
		}
		fail(w, http.StatusBadRequest, "unreadable_body", "reading the body: "+err.Error())
		return nil, false
	}
	return body, true
}

func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request, size, max int64, setting string) {
	got := "more"
	if size >= 0 {
		got = strconv.FormatInt(size, 10)
	}
	s.log.Warn("Request refused: body too large.", zap.String("path", r.URL.Path),
		zap.String("size", got), zap.Int64("limit", max))
	fail(w, http.StatusRequestEntityTooLarge, "body_too_large",
		fmt.Sprintf("body of %s bytes exceeds %s (%d)", got, setting, max))
}
