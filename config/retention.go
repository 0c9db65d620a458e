package config

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/prometheus/common/model"
)

// Retention is how long finished runs are kept. One replica (River's
// elected leader) deletes, every Interval, the runs that finished more than
// Runs ago on the database's clock: their objects (unless Artifacts is
// bucket), then their rows.
type Retention struct {
	// Runs is the age, since it finished, past which a run is deleted; 0 keeps
	// runs for ever (the default). Prometheus-style: 30d, 2w, 720h.
	Runs Age `yaml:"runs" json:"runs"`
	// Artifacts is what happens to a deleted run's objects: delete (the daemon
	// lists the run's folder and deletes them) or bucket (a bucket lifecycle
	// rule expires them; the daemon deletes only rows).
	Artifacts string `yaml:"artifacts" json:"artifacts"`
	// Interval is how often the deleting job runs.
	Interval time.Duration `yaml:"interval" json:"interval"`
}

// What retention does with a deleted run's objects.
const (
	RetainArtifactsDelete = "delete"
	RetainArtifactsBucket = "bucket"
)

// Age is a duration written the Prometheus way, with days and weeks (30d,
// 2w, 36h, 0).
type Age time.Duration

// UnmarshalYAML reads 30d, 2w, 720h or 0; anything else is an error at the
// value's line and column.
func (a *Age) UnmarshalYAML(n ast.Node) error {
	var s string
	if err := yaml.NodeToValue(n, &s); err != nil {
		return err
	}
	if s == "0" {
		*a = 0
		return nil
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		return &yaml.SyntaxError{Message: fmt.Sprintf("%s, got %q", a.want(), s), Token: n.GetToken()}
	}
	*a = Age(d)
	return nil
}

// want is what an age looks like, for errors.
func (Age) want() string { return "want a duration such as 30d, 2w or 720h (0 keeps for ever)" }

// MarshalYAML writes the age as it is read (30d).
func (a Age) MarshalYAML() (any, error) { return a.String(), nil }

// MarshalText makes JSON show 30d too.
func (a Age) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// String is the Prometheus spelling: 30d, 1w, 0s.
func (a Age) String() string { return model.Duration(a).String() }

// checkRetention validates retention:.
func (v *validator) checkRetention(r Retention) {
	const p = "$.retention"
	if r.Runs < 0 {
		v.errorf(p+".runs", "must not be negative")
	}
	switch r.Artifacts {
	case RetainArtifactsDelete, RetainArtifactsBucket:
	default:
		v.errorf(p+".artifacts", "want delete (the daemon deletes a run's objects) or bucket (a bucket lifecycle rule does), got %q", r.Artifacts)
	}
	if r.Interval < time.Minute {
		v.errorf(p+".interval", "%v: want at least 1m", r.Interval)
	}
	if r.Runs > 0 && time.Duration(r.Runs) < time.Hour {
		v.errorf(p+".runs", "%v: want at least 1h, or 0 to keep runs for ever (a run younger than its alert's handling would go)", r.Runs)
	}
}
