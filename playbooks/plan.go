package playbooks

import (
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// Plan is what one matched playbook does for one alert: rendered, built, ready for
// the runner. A run holds one plan per matched playbook (first match, plus later
// matches after a `continue: true`).
type Plan struct {
	Playbook string `json:"playbook"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	// Digest is the sha256 of Source: the run records which version it ran.
	Digest string `json:"digest"`
	// Source is the playbook's own YAML as loaded, self-contained, so a resumed run
	// rebuilds exactly this plan (Rebuild) even after the set was reloaded.
	Source []byte `json:"-"`
	// Timeout bounds the whole plan (0: the daemon's runs.default_timeout).
	Timeout time.Duration `json:"timeout"`
	// Cooldown, with CooldownKey (playbook + the cooldown_by label values), makes a
	// matching alert inside the cooldown a skipped run; the runner checks history.
	Cooldown    time.Duration `json:"cooldown,omitempty"`
	CooldownKey string        `json:"cooldown_key,omitempty"`
	// MaxConcurrent caps runs of this playbook executing at once (0: no cap).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Channel is where the playbook's thread goes (its notify.channel); ""
	// is the notifier's default.
	Channel string `json:"channel,omitempty"`
	// Silence are the alert labels a silence from the run's thread matches
	// (silence.matchers); nil: the daemon's default.
	Silence []string      `json:"silence,omitempty"`
	Steps   []PlannedStep `json:"steps"`
}

// PlannedStep is one step of a plan.
type PlannedStep struct {
	ID              string        `json:"id"`
	Kind            string        `json:"kind"`
	Tier            vocab.Tier    `json:"tier"`
	Timeout         time.Duration `json:"timeout"`
	ContinueOnError bool          `json:"continue_on_error,omitempty"`
	// When is nil for a step that always runs.
	When *Condition `json:"when,omitempty"`
	// Cooldown (kinds that accept it) skips only this step inside the cooldown.
	Cooldown    time.Duration `json:"cooldown,omitempty"`
	CooldownKey string        `json:"cooldown_key,omitempty"`
	// Config is the rendered, decoded config (shown by replay --dry-run, kept in manifests).
	Config any `json:"config"`
	// Step is the built step; nil when RenderErr is set.
	Step vocab.Step `json:"-"`
	// RenderErr is a template error (e.g. a label the alert lacks): the run reports it
	// as this step's failure (reason bad-config) and never sends the half-rendered config.
	RenderErr error `json:"-"`
}

// Condition is a compiled `when` expression.
type Condition struct {
	Source string `json:"source"`
	eval   func(env map[string]any) (bool, error)
}

// MarshalJSON writes the expression's source.
func (c *Condition) MarshalJSON() ([]byte, error) { return []byte(quoteJSON(c.Source)), nil }

// Eval decides whether the step runs, given the alert and the results of the steps
// that succeeded before it in this plan (see Env: steps.<id>.<finding>, .verdict,
// .contributing, .signals, .summary; a step that did not succeed is absent).
func (c *Condition) Eval(alert template.Alert, prior map[string]*vocab.Result) (bool, error) {
	return c.eval(Env(alert, prior))
}

// StoredPlan is the identity of a plan the runner persists on the run row, so a
// resumed run rebuilds the very playbook it started with.
type StoredPlan struct {
	Playbook string `json:"playbook"`
	File     string `json:"file"`
	Digest   string `json:"digest"`
	Source   []byte `json:"source"`
	// Silence is the plan's Silence: a silence made from the thread matches
	// these labels whatever the playbook says after a reload.
	Silence []string `json:"silence,omitempty"`
}

// Stored returns the plan's identity for persisting.
func (p *Plan) Stored() StoredPlan {
	return StoredPlan{Playbook: p.Playbook, File: p.File, Digest: p.Digest, Source: p.Source, Silence: p.Silence}
}
