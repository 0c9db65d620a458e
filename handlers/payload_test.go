package handlers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
)

func TestDecodeAlertRejections(t *testing.T) {
	const ok = `"startsAt":"2026-03-01T10:00:00Z"`
	tests := []struct {
		name   string
		alert  string
		reason string // "" for valid
	}{
		{name: "valid firing", alert: `{"status":"firing","labels":{"alertname":"A"},` + ok + `}`},
		{name: "valid resolved", alert: `{"status":"resolved","labels":{"alertname":"A"},` + ok + `,"endsAt":"2026-03-01T10:05:00Z"}`},
		{name: "utf-8 label name", alert: `{"status":"firing","labels":{"alertname":"A","zone.名":"x"},` + ok + `}`},
		{name: "extra unknown fields", alert: `{"status":"firing","labels":{"alertname":"A"},` + ok + `,"silencedBy":[]}`},
		{name: "not an object", alert: `"firing"`, reason: ReasonBadAlert},
		{name: "labels not a map", alert: `{"status":"firing","labels":["alertname"],` + ok + `}`, reason: ReasonBadAlert},
		{name: "label value not a string", alert: `{"status":"firing","labels":{"alertname":1},` + ok + `}`, reason: ReasonBadAlert},
		{name: "startsAt not a time", alert: `{"status":"firing","labels":{"alertname":"A"},"startsAt":"yesterday"}`, reason: ReasonBadAlert},
		{name: "status pending", alert: `{"status":"pending","labels":{"alertname":"A"},` + ok + `}`, reason: ReasonBadStatus},
		{name: "status missing", alert: `{"labels":{"alertname":"A"},` + ok + `}`, reason: ReasonBadStatus},
		{name: "no labels", alert: `{"status":"firing",` + ok + `}`, reason: ReasonMissingAlertname},
		{name: "blank alertname", alert: `{"status":"firing","labels":{"alertname":"  "},` + ok + `}`, reason: ReasonMissingAlertname},
		{name: "empty label name", alert: `{"status":"firing","labels":{"alertname":"A","":"x"},` + ok + `}`, reason: ReasonBadLabel},
		{name: "control character in label name", alert: `{"status":"firing","labels":{"alertname":"A","a\u0007b":"x"},` + ok + `}`, reason: ReasonBadLabel},
		{name: "huge label name", alert: `{"status":"firing","labels":{"alertname":"A","` + strings.Repeat("x", 300) + `":"x"},` + ok + `}`, reason: ReasonBadLabel},
		{name: "no startsAt", alert: `{"status":"firing","labels":{"alertname":"A"}}`, reason: ReasonMissingStartsAt},
		{name: "fingerprint with a space", alert: `{"status":"firing","labels":{"alertname":"A"},` + ok + `,"fingerprint":"a b"}`, reason: ReasonBadFingerprint},
		{name: "fingerprint too long", alert: `{"status":"firing","labels":{"alertname":"A"},` + ok + `,"fingerprint":"` + strings.Repeat("f", 65) + `"}`, reason: ReasonBadFingerprint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, rej := DecodeAlert(json.RawMessage(tt.alert))
			switch {
			case tt.reason == "" && rej != nil:
				t.Fatalf("rejected: %+v", rej)
			case tt.reason == "" && a.Fingerprint == "":
				t.Fatal("valid alert left without a fingerprint")
			case tt.reason != "" && rej == nil:
				t.Fatalf("accepted, want rejection %q", tt.reason)
			case tt.reason != "" && (rej.Reason != tt.reason || rej.Detail == "" || strings.Contains(rej.Detail, "\n")):
				t.Fatalf("rejection %+v, want reason %q with a one-line detail", rej, tt.reason)
			}
		})
	}
}

// The captured payloads are what Alertmanager 0.25 really sent (see
// TestAlertmanagerPayload); their fingerprints are Alertmanager's own.
func TestDecodeRealPayloads(t *testing.T) {
	files, _ := filepath.Glob("testdata/alertmanager-*.json")
	if len(files) == 0 {
		t.Fatal("no captured payloads in testdata; run TestAlertmanagerPayload with -update")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Decode(raw)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(p.Rejected) != 0 || len(p.Message.Alerts) == 0 || p.Message.GroupKey == "" || len(p.Warnings) != 0 {
				t.Fatalf("payload decoded as %+v", p)
			}
			for _, a := range p.Message.Alerts {
				sent := a.Fingerprint
				a.Fingerprint = ""
				if rej := ValidateAlert(&a); rej != nil || a.Fingerprint != sent {
					t.Errorf("computed fingerprint %q (rejection %v), Alertmanager sent %q", a.Fingerprint, rej, sent)
				}
			}
		})
	}
}

func TestComputedFingerprintIsAlertmanagers(t *testing.T) {
	a, rej := DecodeAlert(json.RawMessage(`{"status":"firing","labels":{"alertname":"A","instance":"x:1"},"startsAt":"2026-03-01T10:00:00Z"}`))
	if rej != nil {
		t.Fatal(rej)
	}
	want := model.LabelSet{"alertname": "A", "instance": "x:1"}.Fingerprint().String()
	if a.Fingerprint != want || len(want) != 16 {
		t.Fatalf("fingerprint %q, want %q", a.Fingerprint, want)
	}
}

func TestDecodeKeepsBodyOrder(t *testing.T) {
	p, err := Decode(body(alertJSON("A", "", "firing"), `{}`, alertJSON("B", "", "firing"), `7`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Valid; len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Errorf("valid positions %v, want [0 2]", got)
	}
	if len(p.Rejected) != 2 || p.Rejected[0].Index != 1 || p.Rejected[1].Index != 3 {
		t.Errorf("rejections %+v, want positions 1 and 3", p.Rejected)
	}
	if p.Message.Alerts[1].Labels["alertname"] != "B" {
		t.Errorf("second valid alert is %v", p.Message.Alerts[1].Labels)
	}
}
