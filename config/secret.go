package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Secret is a string that never prints: it marshals (YAML, JSON, %v) as <secret>.
type Secret string

const redacted = "<secret>"

// String hides the value from fmt.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString hides the value from %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalYAML hides the value.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON hides the value.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Reveal returns the value, for the one place that must compare or send it.
func (s Secret) Reveal() string { return string(s) }

// resolve fills *s from file when set (the `_file` twin), trimming surrounding
// whitespace as Alertmanager does for its credentials_file. Setting both is an
// error; an empty file is left for the validator to refuse (checkSecret), so a
// config built in code is held to the same rule.
func resolve(s *Secret, file, name string) error {
	if file == "" {
		return nil
	}
	if *s != "" {
		return fmt.Errorf("%s and %s_file are both set; choose one", name, name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s_file: %w", name, err)
	}
	*s = Secret(strings.TrimSpace(string(b)))
	return nil
}

// Blank says whether a secret holds nothing to compare or send.
func (s Secret) Blank() bool { return strings.TrimSpace(string(s)) == "" }
