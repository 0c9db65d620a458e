package vocab

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Tier orders the phases of a run: metrics, then triage, then traces, then the
// framed profile. Steps of one tier run in parallel; tiers run in order.
type Tier int

// The tiers, in the order they run.
const (
	TierMetrics Tier = iota + 1 // "1": PromQL, scrape, charts, diagnostics
	TierTriage                  // "triage": the verdict over tier-1 findings
	TierTraces                  // "2": slowest spans of the window
	TierProfile                 // "3": framed profile; cancelled when the alert resolves
)

// Tiers lists every tier in run order.
var Tiers = []Tier{TierMetrics, TierTriage, TierTraces, TierProfile}

var tierNames = map[Tier]string{TierMetrics: "1", TierTriage: "triage", TierTraces: "2", TierProfile: "3"}

// String returns the tier as written in playbooks: "1", "triage", "2" or "3".
func (t Tier) String() string {
	if s, ok := tierNames[t]; ok {
		return s
	}
	return fmt.Sprintf("Tier(%d)", int(t))
}

// ParseTier reads a tier as written in playbooks.
func ParseTier(s string) (Tier, error) {
	s = strings.TrimSpace(s)
	for t, name := range tierNames {
		if name == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q (want 1, triage, 2 or 3)", s)
}

// MarshalJSON writes the tier's playbook name.
func (t Tier) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON reads "1", 1, "triage", "2", 2, "3" or 3.
func (t *Tier) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := ParseTier(s)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// UnmarshalText reads the tier from YAML or flags.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := ParseTier(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// MarshalText writes the tier's playbook name.
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
