package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// maxSegment bounds one key segment; label values can be arbitrarily long.
const maxSegment = 128

// Segment makes one safe key segment from untrusted text (an alert label, a step
// id): anything outside [A-Za-z0-9._-] becomes '_', leading dots are dropped (no
// "..", no hidden files), and an empty result becomes "_".
func Segment(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)), r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= maxSegment {
			break
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if out == "" {
		return "_"
	}
	return out
}

// Key joins segments, each made safe with Segment, into a relative slash-separated key.
func Key(parts ...string) string {
	safe := make([]string, len(parts))
	for i, p := range parts {
		safe[i] = Segment(p)
	}
	return strings.Join(safe, "/")
}

// ValidKey rejects keys that could escape the store: empty, absolute, with ".."
// or "." segments, empty segments, backslashes or control characters.
func ValidKey(key string) error {
	if key == "" {
		return fmt.Errorf("storage: empty key")
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("storage: key %q is absolute", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("storage: key %q has a control character or backslash", key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("storage: key %q has an empty, '.' or '..' segment", key)
		}
	}
	return nil
}

// ValidPrefix rejects list prefixes that could reach outside the store: ""
// lists all; otherwise the prefix must be the start of a valid key (no "..",
// ".", empty or absolute folder, no backslash or control character). A Local
// store walks the folders a prefix names, so "../" would list beside its root.
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidKey(prefix + "x"); err != nil { // "x": a prefix may end inside a segment or at a "/"
		return fmt.Errorf("storage: list prefix %q could escape the store", prefix)
	}
	return nil
}

// ArtifactPath names one artifact of a run; ArtifactKey turns it into a key.
type ArtifactPath struct {
	// Started is when the run was accepted; its UTC date makes the
	// yyyy/mm/dd folders (the same on every attempt of the run).
	Started time.Time
	// Alertname, RunID, Plan, Step and File come from alert labels, playbooks
	// and steps: untrusted, each sanitized into one segment.
	Alertname, RunID, Plan, Step, File string
	// Attempt is the run's attempt; above 1 the file goes under
	// <step>/attempt-<n>/: a step re-run after a resume gathers new bytes, and
	// a key, once written, is never overwritten.
	Attempt int
}

// ArtifactKey is the key a person can browse:
//
//	yyyy/mm/dd/<alertname>/<run-id>/<plan>/<step>/<file>
//	yyyy/mm/dd/<alertname>/<run-id>/<plan>/<step>/attempt-<n>/<file>   (a resumed attempt)
//
// (an S3 store puts its prefix in front). Each label-derived part becomes one
// safe segment: what Segment keeps, and when sanitizing changed or cut the
// value, a "~" and 8 hex digits of its SHA-256, so two different hostile
// values never share a folder (e.g. "模型" → "__~1a2b3c4d"). The same path
// always gives the same key, which makes a re-put after resume idempotent.
func ArtifactKey(p ArtifactPath) string {
	parts := []string{strings.TrimSuffix(RunPrefix(p.Started, p.Alertname, p.RunID), "/"), labelSegment(p.Plan), labelSegment(p.Step)}
	if p.Attempt > 1 {
		parts = append(parts, fmt.Sprintf("attempt-%d", p.Attempt))
	}
	return strings.Join(append(parts, labelSegment(p.File)), "/")
}

// RunPrefix is the folder holding every object of one run, ending in "/":
// yyyy/mm/dd/<alertname>/<run-id>/. Retention lists and deletes under it.
func RunPrefix(started time.Time, alertname, runID string) string {
	d := started.UTC()
	return strings.Join([]string{
		fmt.Sprintf("%04d", d.Year()), fmt.Sprintf("%02d", int(d.Month())), fmt.Sprintf("%02d", d.Day()),
		labelSegment(alertname), labelSegment(runID), "",
	}, "/")
}

// ManifestKey is the run's manifest.json, beside its plans' folders.
func ManifestKey(started time.Time, alertname, runID string) string {
	return RunPrefix(started, alertname, runID) + "manifest.json"
}

// labelSegment is Segment, disambiguated by a short hash when it altered s.
func labelSegment(s string) string {
	seg := Segment(s)
	if seg == s {
		return seg
	}
	sum := sha256.Sum256([]byte(s))
	const suffix = 1 + 8
	if len(seg) > maxSegment-suffix {
		seg = seg[:maxSegment-suffix]
	}
	return seg + "~" + hex.EncodeToString(sum[:4])
}
