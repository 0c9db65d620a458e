package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/internal/clip"
)

// WebhookVersion is the only Alertmanager webhook payload version understood.
const WebhookVersion = "4"

// Message is Alertmanager's webhook body (version 4): template.Data plus the three
// fields notify/webhook adds. Declared here because importing notify/webhook pulls in
// about 110 modules.
type Message struct {
	template.Data
	Version         string `json:"version"`
	GroupKey        string `json:"groupKey"`
	TruncatedAlerts uint64 `json:"truncatedAlerts"`
}

// Payload is a decoded webhook body: the envelope, the alerts that passed
// validation and the ones that did not, each with its position in the body.
type Payload struct {
	// Message is the envelope; Message.Alerts holds only the valid alerts.
	Message Message
	// Valid holds the position in the body of each alert in Message.Alerts.
	Valid []int
	// Rejected are the alerts that failed validation, in body order.
	Rejected []Rejection
	// Warnings name envelope fields that were ignored because of their type.
	Warnings []string
}

// Rejection is one alert refused on its own, the rest of its group going ahead.
type Rejection struct {
	Index       int    `json:"index"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Alertname   string `json:"alertname,omitempty"`
	// Reason is one of the Reason* constants (also the metric label).
	Reason string `json:"reason"`
	// Detail is one line saying what exactly was wrong.
	Detail string `json:"detail"`
}

// Reasons an alert is rejected for: the bounded label set of
// autocapture_alerts_rejected_total.
const (
	ReasonBadAlert         = "bad_alert" // not a JSON object, or a field of the wrong type
	ReasonBadStatus        = "bad_status"
	ReasonMissingAlertname = "missing_alertname"
	ReasonMissingStartsAt  = "missing_starts_at"
	ReasonBadLabel         = "bad_label"
	ReasonBadFingerprint   = "bad_fingerprint"
)

// RejectReasons lists every rejection reason.
var RejectReasons = []string{ReasonBadAlert, ReasonBadStatus, ReasonMissingAlertname,
	ReasonMissingStartsAt, ReasonBadLabel, ReasonBadFingerprint}

// BodyError says why a body as a whole is unusable (the webhook answers 400).
type BodyError struct {
	// Code is a short machine-readable word: not_json, no_alerts, bad_version.
	Code string
	// Msg is one line for people.
	Msg string
}

// Error returns the one-line reason.
func (e *BodyError) Error() string { return e.Msg }

// Codes of BodyError.
const (
	CodeNotJSON    = "not_json"
	CodeNoAlerts   = "no_alerts"
	CodeBadVersion = "bad_version"
)

// Limits that keep one alert within reason.
const (
	maxLabelNameLen   = 256
	maxFingerprintLen = 64
	// maxReason bounds an error's one-line reason in an answer or a log line.
	maxReason = 200
)

// envelope is the body with each field kept raw, so one field of the wrong type
// spoils only itself; unknown fields are ignored (newer Alertmanagers add some).
type envelope struct {
	Version            json.RawMessage `json:"version"`
	GroupKey           json.RawMessage `json:"groupKey"`
	TruncatedAlerts    json.RawMessage `json:"truncatedAlerts"`
	Receiver           json.RawMessage `json:"receiver"`
	Status             json.RawMessage `json:"status"`
	Alerts             json.RawMessage `json:"alerts"`
	NotificationReason json.RawMessage `json:"notification_reason"`
	GroupLabels        json.RawMessage `json:"groupLabels"`
	CommonLabels       json.RawMessage `json:"commonLabels"`
	CommonAnnotations  json.RawMessage `json:"commonAnnotations"`
	ExternalURL        json.RawMessage `json:"externalURL"`
}

// Decode parses a webhook body. It fails (with a *BodyError) only when the body
// as a whole is unusable: not a JSON object, a version other than "4", no
// alerts array or an empty one (nothing is lost by refusing it). Each alert is then validated on its own: the valid ones land in
// Message.Alerts (fingerprint filled in when absent), the rest in Rejected.
func Decode(body []byte) (*Payload, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, &BodyError{Code: CodeNotJSON, Msg: "body is not a JSON object: " + clip.Line(err.Error(), maxReason)}
	}
	var version string
	if err := json.Unmarshal(env.Version, &version); err != nil || version != WebhookVersion {
		got := string(env.Version)
		if len(env.Version) == 0 {
			got = "none"
		}
		return nil, &BodyError{Code: CodeBadVersion, Msg: fmt.Sprintf("webhook version %s is not supported, want %q", clip.String(got, 40), WebhookVersion)}
	}
	var raws []json.RawMessage
	if isNull(env.Alerts) || json.Unmarshal(env.Alerts, &raws) != nil {
		return nil, &BodyError{Code: CodeNoAlerts, Msg: "body has no \"alerts\" array"}
	}
	if len(raws) == 0 {
		return nil, &BodyError{Code: CodeNoAlerts, Msg: "the \"alerts\" array is empty"}
	}
	p := &Payload{Message: Message{Version: version}}
	p.decodeEnvelope(&env)
	p.Message.Alerts = make(template.Alerts, 0, len(raws))
	for i, raw := range raws {
		a, rej := DecodeAlert(raw)
		if rej != nil {
			rej.Index = i
			p.Rejected = append(p.Rejected, *rej)
			continue
		}
		p.Message.Alerts = append(p.Message.Alerts, a)
		p.Valid = append(p.Valid, i)
	}
	return p, nil
}

// decodeEnvelope fills the envelope fields we only carry along, ignoring (with a
// warning) any of the wrong type.
func (p *Payload) decodeEnvelope(env *envelope) {
	m := &p.Message
	fields := []struct {
		name string
		raw  json.RawMessage
		dst  any
	}{
		{"groupKey", env.GroupKey, &m.GroupKey},
		{"truncatedAlerts", env.TruncatedAlerts, &m.TruncatedAlerts},
		{"receiver", env.Receiver, &m.Receiver},
		{"status", env.Status, &m.Status},
		{"notification_reason", env.NotificationReason, &m.NotificationReason},
		{"groupLabels", env.GroupLabels, &m.GroupLabels},
		{"commonLabels", env.CommonLabels, &m.CommonLabels},
		{"commonAnnotations", env.CommonAnnotations, &m.CommonAnnotations},
		{"externalURL", env.ExternalURL, &m.ExternalURL},
	}
	for _, f := range fields {
		if len(f.raw) == 0 || isNull(f.raw) {
			continue
		}
		if err := json.Unmarshal(f.raw, f.dst); err != nil {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s ignored: %s", f.name, clip.Line(err.Error(), maxReason)))
		}
	}
}

// DecodeAlert decodes and validates one alert of a webhook body. On success the
// alert's fingerprint is set (computed from the labels as Alertmanager does when
// the sender left it out); otherwise the rejection says why (its Index is left 0).
func DecodeAlert(raw json.RawMessage) (template.Alert, *Rejection) {
	var a template.Alert
	if err := json.Unmarshal(raw, &a); err != nil {
		return template.Alert{}, &Rejection{Reason: ReasonBadAlert, Detail: "alert is not a valid object: " + clip.Line(err.Error(), maxReason)}
	}
	if rej := ValidateAlert(&a); rej != nil {
		return template.Alert{}, rej
	}
	return a, nil
}

// ValidateAlert checks one alert: status firing or resolved, sane label names and
// values, an alertname, a startsAt, a sane fingerprint. It fills in a missing
// fingerprint (model.LabelSet.Fingerprint, Alertmanager's own).
func ValidateAlert(a *template.Alert) *Rejection {
	rej := func(reason, format string, args ...any) *Rejection {
		return &Rejection{Reason: reason, Fingerprint: clip.String(a.Fingerprint, maxFingerprintLen),
			Alertname: clip.String(a.Labels["alertname"], 128), Detail: fmt.Sprintf(format, args...)}
	}
	if a.Status != string(model.AlertFiring) && a.Status != string(model.AlertResolved) {
		return rej(ReasonBadStatus, "status %q is neither firing nor resolved", clip.String(a.Status, 40))
	}
	for name, value := range a.Labels {
		if err := checkLabel(name, value); err != nil {
			return rej(ReasonBadLabel, "%v", err)
		}
	}
	if strings.TrimSpace(a.Labels["alertname"]) == "" {
		return rej(ReasonMissingAlertname, "labels have no alertname")
	}
	if a.StartsAt.IsZero() {
		return rej(ReasonMissingStartsAt, "startsAt is not set")
	}
	if a.Fingerprint == "" {
		ls := make(model.LabelSet, len(a.Labels))
		for k, v := range a.Labels {
			ls[model.LabelName(k)] = model.LabelValue(v)
		}
		a.Fingerprint = ls.Fingerprint().String()
	} else if err := checkFingerprint(a.Fingerprint); err != nil {
		return rej(ReasonBadFingerprint, "%v", err)
	}
	return nil
}

func checkLabel(name, value string) error {
	switch {
	case len(name) > maxLabelNameLen:
		return fmt.Errorf("label name %q… is longer than %d bytes", clip.String(name, 40), maxLabelNameLen)
	case !model.UTF8Validation.IsValidLabelName(name):
		return fmt.Errorf("label name %q is not valid", clip.String(name, 40))
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("label name %q contains control characters", clip.String(name, 40))
	case !utf8.ValidString(value):
		return fmt.Errorf("label %q has a value that is not UTF-8", clip.String(name, 40))
	}
	return nil
}

// checkFingerprint accepts what Alertmanager sends (16 hex digits) and other
// senders' ids of printable ASCII without spaces, up to 64 bytes.
func checkFingerprint(fp string) error {
	if len(fp) > maxFingerprintLen {
		return fmt.Errorf("fingerprint is longer than %d bytes", maxFingerprintLen)
	}
	for i := 0; i < len(fp); i++ {
		if fp[i] <= ' ' || fp[i] > '~' {
			return fmt.Errorf("fingerprint %q has a character outside printable ASCII", clip.String(fp, maxFingerprintLen))
		}
	}
	return nil
}

// IsBodyError reports whether err is a *BodyError and returns it.
func IsBodyError(err error) (*BodyError, bool) {
	var be *BodyError
	ok := errors.As(err, &be)
	return be, ok
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
