package handlers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzDecode checks the webhook decoder's promises on any body: it never
// panics; it returns either a *BodyError (the 400) or a payload, never both nor
// neither; every alert it lets through passes validation unchanged; each alert
// of the body is either valid or rejected with a known reason, in body order.
//
// Seeds: the bodies a real Alertmanager 0.25 sent (testdata/alertmanager-*.json,
// captured by TestAlertmanagerPayload) plus hand-made edge cases.
//
//	go test ./handlers -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/alertmanager-*.json")
	if len(files) == 0 {
		f.Fatal("no captured Alertmanager payloads in testdata")
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(body(alertJSON("A", "", "firing"), `{}`, `7`, alertJSON("B", "x y", "resolved")))
	f.Add([]byte(`{"version":"4","alerts":[]}`))
	f.Add([]byte(`{"version":"4","alerts":null}`))
	f.Add([]byte(`{"version":4}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"version":"4","alerts":[{"status":"firing","labels":{"alertname":"\u0000","":""},"startsAt":"2026-01-01T00:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if (err == nil) == (p == nil) {
			t.Fatalf("Decode returned payload %v and error %v", p, err)
		}
		if err != nil {
			be, ok := IsBodyError(err)
			if !ok || be.Code == "" || be.Msg == "" || strings.Contains(be.Msg, "\n") {
				t.Fatalf("error %#v is not a BodyError with a code and a one-line message", err)
			}
			return
		}
		checkPayload(t, p)
	})
}

func checkPayload(t *testing.T, p *Payload) {
	t.Helper()
	if p.Message.Version != WebhookVersion {
		t.Fatalf("accepted version %q", p.Message.Version)
	}
	if len(p.Valid) != len(p.Message.Alerts) {
		t.Fatalf("%d valid positions for %d alerts", len(p.Valid), len(p.Message.Alerts))
	}
	total := len(p.Valid) + len(p.Rejected)
	if total == 0 {
		t.Fatal("a payload without alerts was not refused")
	}
	seen := make([]bool, total)
	for i, idx := range p.Valid {
		if idx < 0 || idx >= total || seen[idx] || (i > 0 && idx <= p.Valid[i-1]) {
			t.Fatalf("valid positions %v out of order or out of range", p.Valid)
		}
		seen[idx] = true
	}
	for _, r := range p.Rejected {
		if r.Index < 0 || r.Index >= total || seen[r.Index] {
			t.Fatalf("rejection at position %d collides or is out of range", r.Index)
		}
		seen[r.Index] = true
		if !slices.Contains(RejectReasons, r.Reason) || r.Detail == "" || strings.Contains(r.Detail, "\n") {
			t.Fatalf("rejection %+v lacks a known reason or a one-line detail", r)
		}
	}
	for _, a := range p.Message.Alerts {
		fp := a.Fingerprint
		if fp == "" {
			t.Fatal("valid alert without a fingerprint")
		}
		if rej := ValidateAlert(&a); rej != nil || a.Fingerprint != fp {
			t.Fatalf("accepted alert %+v fails validation: %+v", a, rej)
		}
	}
}
