package config

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/prometheus/common/model"
)

// Retention is how long finished runs are kept. Runs are kept for ever
// unless retention.runs says otherwise. One replica (River's elected leader)
// deletes, every retention.interval, in batches, the finished runs whose end
// is older than retention.runs on the database's clock: first their objects
// (their folder and every key their steps recorded; unless
// retention.artifacts is bucket), then all their rows in one transaction; a
// crash in between is finished by the next tick. Unfinished runs are never
// touched. autocapture_retention_deleted_total{kind="runs"|"objects"} and
// autocapture_retention_errors_total count it.
type Retention struct {
	// Runs is the age, since it finished, past which a run is deleted with
	// its objects; 0 keeps runs for ever (the default), else at least 1h.
	// Prometheus-style: 30d, 2w, 720h.
	Runs Age `yaml:"runs" json:"runs"`
	// Artifacts is what happens to a deleted run's objects: delete (the daemon
	// lists the run's folder and deletes each object, then the rows) or
	// bucket (a bucket lifecycle rule expires them, see storage/README.md;
	// the daemon deletes only rows).
	Artifacts string `yaml:"artifacts" json:"artifacts"`
	// Interval is how often the deleting job runs (at least 1m).
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
		return &yaml.SyntaxError{Message: fmt.Sprintf("%s, got %q", a.WantYAML(), s), Token: n.GetToken()}
	}
	*a = Age(d)
	return nil
}

// want is what an age looks like, for errors.
func (Age) WantYAML() string { return "want a duration such as 30d, 2w or 720h (0 keeps for ever)" }

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
