package vllmsim

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Shape is an explicit traffic shape laid over a scenario's load: every
// field set replaces the matching LoadSpec field, every field left nil keeps
// the scenario's (a distribution's unset members too). Field names are
// LoadSpec's. A test scripts an incident with it, e.g. healthy traffic whose
// prompts turn 5× longer:
//
//	sim.SetShape(vllmsim.Shape{PromptTokens: &vllmsim.DistShape{Mean: new(1750.0), Max: new(7500.0)}})
//
// The same as JSON (POST /admin/scenario):
//
//	{"shape":{"prompt_tokens":{"mean":1750,"max":7500}}}
type Shape struct {
	// RPS is the open-loop Poisson arrival rate, requests/s (0: none).
	RPS *float64 `json:"rps,omitempty"`
	// Concurrency is the number of closed-loop clients (0: none).
	Concurrency *int `json:"concurrency,omitempty"`
	// RampUp spreads the closed-loop clients' first requests.
	RampUp *Duration `json:"ramp_up,omitempty"`
	// ThinkTime is a closed-loop client's mean pause between requests.
	ThinkTime    *Duration  `json:"think_time,omitempty"`
	PromptTokens *DistShape `json:"prompt_tokens,omitempty"`
	OutputTokens *DistShape `json:"output_tokens,omitempty"`
	// MaxTokens is the max_tokens every request asks for.
	MaxTokens *int `json:"max_tokens,omitempty"`
	// Timeout is the client's patience in seconds from arrival; past it the
	// client aborts (this is how aborts are injected). Mean 0: never.
	Timeout      *DistShape `json:"timeout_s,omitempty"`
	SharedPrefix *int       `json:"shared_prefix,omitempty"`
}

// DistShape overlays a Dist: members set replace the base's.
type DistShape struct {
	Mean  *float64 `json:"mean,omitempty"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
	Sigma *float64 `json:"sigma,omitempty"`
}

// ShapeOf is the shape that sets every field to l's: the Go way to script a
// change relative to the traffic now (read State().Load, edit, ShapeOf).
func ShapeOf(l LoadSpec) Shape {
	d := func(x Dist) *DistShape {
		return &DistShape{Mean: new(x.Mean), Min: new(x.Min), Max: new(x.Max), Sigma: new(x.Sigma)}
	}
	return Shape{
		RPS: new(l.RPS), Concurrency: new(l.Concurrency),
		RampUp: new(Duration(l.RampUp)), ThinkTime: new(Duration(l.ThinkTime)),
		PromptTokens: d(l.PromptTokens), OutputTokens: d(l.OutputTokens),
		MaxTokens: new(l.MaxTokens), Timeout: d(l.Timeout), SharedPrefix: new(l.SharedPrefix),
	}
}

func (sh Shape) empty() bool { return sh == Shape{} }

// apply lays sh over l.
func (sh Shape) apply(l LoadSpec) LoadSpec {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	if sh.RPS != nil {
		l.RPS = *sh.RPS
	}
	set(&l.Concurrency, sh.Concurrency)
	set(&l.MaxTokens, sh.MaxTokens)
	set(&l.SharedPrefix, sh.SharedPrefix)
	if sh.RampUp != nil {
		l.RampUp = time.Duration(*sh.RampUp)
	}
	if sh.ThinkTime != nil {
		l.ThinkTime = time.Duration(*sh.ThinkTime)
	}
	l.PromptTokens = sh.PromptTokens.apply(l.PromptTokens)
	l.OutputTokens = sh.OutputTokens.apply(l.OutputTokens)
	l.Timeout = sh.Timeout.apply(l.Timeout)
	return l
}

func (d *DistShape) apply(base Dist) Dist {
	if d == nil {
		return base
	}
	for _, f := range []struct {
		dst *float64
		v   *float64
	}{{&base.Mean, d.Mean}, {&base.Min, d.Min}, {&base.Max, d.Max}, {&base.Sigma, d.Sigma}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	return base
}

// Limits a traffic shape must stay inside: beyond them the sim would spend
// its CPU on the load generator, not model an incident.
const (
	maxShapeRPS         = 1000
	maxShapeConcurrency = 4096
	maxShapeDuration    = time.Hour
	maxShapeSigma       = 3
)

// validateShape checks what the overlay alone can get wrong (a set-but-empty
// distribution); validate checks the result.
func (sh Shape) validateShape() error {
	if sh.empty() {
		return fmt.Errorf("shape: empty: set at least one of rps, concurrency, ramp_up, think_time, prompt_tokens, output_tokens, max_tokens, timeout_s, shared_prefix")
	}
	for _, f := range []struct {
		name string
		d    *DistShape
	}{{"prompt_tokens", sh.PromptTokens}, {"output_tokens", sh.OutputTokens}, {"timeout_s", sh.Timeout}} {
		if f.d != nil && *f.d == (DistShape{}) {
			return fmt.Errorf("shape: %s: empty: set at least one of mean, min, max, sigma", f.name)
		}
	}
	return nil
}

// validate checks a load the generator is about to run: every rate, count
// and distribution in range, and the longest request (prompt max plus
// output cap) inside max-model-len. Errors name the field by its JSON name.
func (l LoadSpec) validate(maxModelLen int) error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !(l.RPS >= 0 && l.RPS <= maxShapeRPS) {
		bad("rps %v: want 0..%d", l.RPS, maxShapeRPS)
	}
	if l.Concurrency < 0 || l.Concurrency > maxShapeConcurrency {
		bad("concurrency %d: want 0..%d", l.Concurrency, maxShapeConcurrency)
	}
	if l.RampUp < 0 || l.RampUp > maxShapeDuration {
		bad("ramp_up %v: want 0..%v", l.RampUp, maxShapeDuration)
	}
	if l.ThinkTime < 0 || l.ThinkTime > maxShapeDuration {
		bad("think_time %v: want 0..%v", l.ThinkTime, maxShapeDuration)
	}
	checkDist := func(name string, d Dist, minMean float64, bounded bool) {
		switch {
		case !(d.Sigma >= 0 && d.Sigma <= maxShapeSigma):
			bad("%s: sigma %v: want 0..%d", name, d.Sigma, maxShapeSigma)
		case !(d.Min >= 0):
			bad("%s: min %v: want >= 0", name, d.Min)
		case bounded && !(d.Max > 0):
			bad("%s: max %v: want a bound > 0", name, d.Max)
		case d.Max != 0 && !(d.Max >= d.Min):
			bad("%s: max %v below min %v", name, d.Max, d.Min)
		case !(d.Mean >= minMean):
			bad("%s: mean %v: want >= %v", name, d.Mean, minMean)
		case d.Mean < d.Min || (d.Max != 0 && d.Mean > d.Max):
			// Legal for a log-normal, but every draw would sit on the bound:
			// almost always a shape that forgot to move min or max.
			bad("%s: mean %v outside [min %v, max %v]: move the bound too", name, d.Mean, d.Min, d.Max)
		}
	}
	checkDist("prompt_tokens", l.PromptTokens, 1, true)
	checkDist("output_tokens", l.OutputTokens, 1, true)
	checkDist("timeout_s", l.Timeout, 0, false)
	if l.MaxTokens < 1 {
		bad("max_tokens %d: want >= 1", l.MaxTokens)
	}
	if l.SharedPrefix < 0 || l.SharedPrefix > maxModelLen {
		bad("shared_prefix %d: want 0..%d", l.SharedPrefix, maxModelLen)
	}
	if longest := int(l.PromptTokens.Max) + min(int(l.OutputTokens.Max), l.MaxTokens); len(errs) == 0 && longest > maxModelLen {
		bad("prompt_tokens max %v + output (max %v, max_tokens %d) = %d tokens: over max-model-len %d",
			l.PromptTokens.Max, l.OutputTokens.Max, l.MaxTokens, longest, maxModelLen)
	}
	if len(errs) > 0 {
		return fmt.Errorf("traffic: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Duration is a time.Duration read and written as Go's duration text
// ("30s", "1m30s", "250ms"); a bare number is refused (seconds or ns?).
type Duration time.Duration

// MarshalJSON writes d as duration text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want text like \"30s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
