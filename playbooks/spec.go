package playbooks

import (
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/invopop/jsonschema"

	"github.com/autocapture/autocapture/vocab"
)

// FileSpec is a playbook file as written: a list of playbooks and, optionally,
// their tests. It is the root of the JSON schema (schema.json).
type FileSpec struct {
	Playbooks []PlaybookSpec `yaml:"playbooks" json:"playbooks" jsonschema:"description=Playbooks tried in order; the first match runs (see continue)."`
	Presets   []PresetSpec   `yaml:"presets,omitempty" json:"presets,omitempty" jsonschema:"description=Named step lists any playbook of the set includes with - use: <name>."`
	Tests     []TestSpec     `yaml:"tests,omitempty" json:"tests,omitempty" jsonschema:"description=Cases run by autocapture test with no network."`
}

// PlaybookSpec is one playbook as written. Steps and vars are decoded by hand (a
// step's kind key is open-ended), so they are raw YAML nodes here; the schema
// describes them separately.
type PlaybookSpec struct {
	Name          string        `yaml:"name" json:"name" jsonschema:"required,minLength=1,description=Unique across the set."`
	Description   string        `yaml:"description,omitempty" json:"description,omitempty"`
	Match         []string      `yaml:"match,omitempty" json:"match,omitempty" jsonschema:"description=Alertmanager matchers (alertname=\"X\" or severity=~\"page|critical\"); all must hold."`
	Continue      bool          `yaml:"continue,omitempty" json:"continue,omitempty" jsonschema:"description=Let later matching playbooks run too."`
	Timeout       time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty" jsonschema:"description=Bound on the whole plan."`
	Cooldown      time.Duration `yaml:"cooldown,omitempty" json:"cooldown,omitempty" jsonschema:"description=A matching alert with the same cooldown_by label values inside this window becomes a skipped run."`
	CooldownBy    []string      `yaml:"cooldown_by,omitempty" json:"cooldown_by,omitempty"`
	MaxConcurrent int           `yaml:"max_concurrent,omitempty" json:"max_concurrent,omitempty" jsonschema:"minimum=0"`
	Vars          ast.Node      `yaml:"vars,omitempty" json:"vars,omitempty"`
	Notify        *NotifySpec   `yaml:"notify,omitempty" json:"notify,omitempty"`
	Silence       *SilenceSpec  `yaml:"silence,omitempty" json:"silence,omitempty"`
	Steps         []ast.Node    `yaml:"steps" json:"steps"`
}

// PresetSpec is one preset as written: a named list of plain steps (no use:).
type PresetSpec struct {
	Name        string     `yaml:"name" json:"name" jsonschema:"required,pattern=^[A-Za-z0-9][A-Za-z0-9_.-]*$,description=Unique across the set; playbooks write - use: <name>."`
	Description string     `yaml:"description,omitempty" json:"description,omitempty"`
	Steps       []ast.Node `yaml:"steps" json:"steps"`
}

// UseSpec is an item of a playbook's steps that includes a preset's steps there.
type UseSpec struct {
	Use  string   `yaml:"use" json:"use" jsonschema:"required,minLength=1,description=The name of a preset of the set."`
	With ast.Node `yaml:"with,omitempty" json:"with,omitempty"`
}

// NotifySpec says where a playbook's thread goes (used by Slack).
type NotifySpec struct {
	Channel string `yaml:"channel" json:"channel" jsonschema:"required,description=Slack channel name (#oncall) or id."`
	Thread  string `yaml:"thread,omitempty" json:"thread,omitempty" jsonschema:"enum=per-alert,enum=per-run,description=One thread per firing alert (default) or per run."`
}

// SilenceSpec says what a silence made from the playbook's threads matches.
type SilenceSpec struct {
	Matchers []string `yaml:"matchers" json:"matchers" jsonschema:"required,minItems=1,uniqueItems=true,description=Alert labels the silence matches with the alert's values; alertname is required. Default: alertname\\, instance\\, model_name."`
}

// JSONSchemaExtend holds each matcher to a label name and the list to one
// naming alertname, as the loader does.
func (SilenceSpec) JSONSchemaExtend(s *jsonschema.Schema) {
	if p, ok := s.Properties.Get("matchers"); ok && p.Items != nil {
		p.Items.Pattern = labelNamePattern
		p.Contains = &jsonschema.Schema{Const: silenceNeeds}
	}
}

// Thread modes a notify block accepts.
var threadModes = []string{"per-alert", "per-run"}

// StepSpec is the fixed part of a step; the one remaining key names its kind.
type StepSpec struct {
	ID              string        `yaml:"id" json:"id" jsonschema:"required,pattern=^[a-z][a-z0-9_]*$,description=Unique in the playbook; when expressions read steps.<id>."`
	Tier            ast.Node      `yaml:"tier,omitempty" json:"tier,omitempty"`
	Timeout         time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	When            string        `yaml:"when,omitempty" json:"when,omitempty" jsonschema:"description=expr-lang expression over alert and steps of earlier tiers."`
	ContinueOnError bool          `yaml:"continue_on_error,omitempty" json:"continue_on_error,omitempty"`
	Cooldown        time.Duration `yaml:"cooldown,omitempty" json:"cooldown,omitempty" jsonschema:"description=Skip only this step inside the cooldown (kinds that accept it)."`
}

// stepFields are the keys of StepSpec; any other key of a step is its kind.
var stepFields = map[string]bool{"id": true, "tier": true, "timeout": true, "when": true,
	"continue_on_error": true, "cooldown": true}

// TestSpec is one case of a file's tests: block.
type TestSpec struct {
	Name   string              `yaml:"name" json:"name" jsonschema:"required"`
	Alert  AlertSpec           `yaml:"alert" json:"alert" jsonschema:"required"`
	Mocks  map[string]MockSpec `yaml:"mocks,omitempty" json:"mocks,omitempty" jsonschema:"description=Canned results by step id; those steps do not run."`
	Expect ExpectSpec          `yaml:"expect" json:"expect" jsonschema:"required"`
}

// AlertSpec is a test's sample alert.
type AlertSpec struct {
	Labels       map[string]string `yaml:"labels" json:"labels" jsonschema:"required"`
	Annotations  map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
	Status       string            `yaml:"status,omitempty" json:"status,omitempty" jsonschema:"enum=firing,enum=resolved"`
	StartsAt     time.Time         `yaml:"starts_at,omitempty" json:"starts_at,omitempty"`
	EndsAt       time.Time         `yaml:"ends_at,omitempty" json:"ends_at,omitempty"`
	GeneratorURL string            `yaml:"generator_url,omitempty" json:"generator_url,omitempty"`
}

// MockSpec is a canned step result, or a canned failure.
type MockSpec struct {
	Summary  string             `yaml:"summary,omitempty" json:"summary,omitempty"`
	Signals  map[string]float64 `yaml:"signals,omitempty" json:"signals,omitempty"`
	Findings map[string]any     `yaml:"findings,omitempty" json:"findings,omitempty"`
	Verdict  *VerdictSpec       `yaml:"verdict,omitempty" json:"verdict,omitempty"`
	Error    *MockError         `yaml:"error,omitempty" json:"error,omitempty"`
}

// VerdictSpec is a canned triage verdict.
type VerdictSpec struct {
	ID           string   `yaml:"id" json:"id" jsonschema:"required"`
	Contributing []string `yaml:"contributing,omitempty" json:"contributing,omitempty"`
}

// MockError is a canned step failure.
type MockError struct {
	Reason  string `yaml:"reason" json:"reason" jsonschema:"required"`
	Message string `yaml:"message,omitempty" json:"message,omitempty"`
}

// JSONSchemaExtend lists vocab.Reasons as the reason's allowed values.
func (MockError) JSONSchemaExtend(s *jsonschema.Schema) {
	if p, ok := s.Properties.Get("reason"); ok {
		p.Enum = nil
		for _, r := range vocab.Reasons {
			p.Enum = append(p.Enum, string(r))
		}
	}
}

// ExpectSpec is what a test case asserts about the run of its alert.
type ExpectSpec struct {
	// Playbooks, when set, are exactly the matched playbooks in order.
	Playbooks []string `yaml:"playbooks,omitempty" json:"playbooks,omitempty"`
	// Ran, Skipped, Failed and NotConfigured list step ids (or
	// playbook/step) that must have run (succeeded), been skipped by when or
	// cooldown, failed, or not run because what they need is not configured
	// (a test runs with no Prometheus and no trace backend).
	Ran           []string `yaml:"ran,omitempty" json:"ran,omitempty"`
	Skipped       []string `yaml:"skipped,omitempty" json:"skipped,omitempty"`
	Failed        []string `yaml:"failed,omitempty" json:"failed,omitempty"`
	NotConfigured []string `yaml:"not_configured,omitempty" json:"not_configured,omitempty"`
	// Verdict is the triage verdict id ("" leaves it unchecked).
	Verdict string `yaml:"verdict,omitempty" json:"verdict,omitempty"`
	// SummaryContains maps a step id to text its summary must contain.
	SummaryContains map[string]string `yaml:"summary_contains,omitempty" json:"summary_contains,omitempty"`
}
