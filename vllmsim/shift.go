package vllmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Change is a switch of the injected cause, of the traffic, or both, now or
// after a delay: how a test scripts an incident that starts healthy and
// shifts (healthy → overload at 30 s; healthy → prompts 5× longer; …).
type Change struct {
	// Scenario is the cause to switch to; "" keeps the current one.
	Scenario string
	// Shape is laid over the scenario's load (see Shape). nil with a
	// Scenario: that scenario's own traffic; nil without one: nothing to do.
	// With Scenario "", it replaces the current shape.
	Shape *Shape
	// After delays the change by this much simulated time (virtual with
	// Advance, wall time with Run); 0 applies it now.
	After time.Duration
}

// PendingShift is a change scheduled and not yet applied.
type PendingShift struct {
	// Scenario is the scenario it switches to (the one current when it was
	// scheduled, if the change kept it).
	Scenario string `json:"scenario"`
	Shape    *Shape `json:"shape,omitempty"`
	// At is when it applies, on the sim's clock (Sim.Now).
	At time.Time `json:"at"`
}

// pendingShift is a scheduled change on the engine clock.
type pendingShift struct {
	scenario Scenario
	shape    *Shape
	at       time.Duration
}

// Shift switches to scenario after the given delay (0: now), as
// --shift-after does. It replaces any pending shift.
func (s *Sim) Shift(scenario string, after time.Duration) error {
	return s.ShiftTo(Change{Scenario: scenario, After: after})
}

// SetShape lays sh over the current scenario's traffic now, replacing any
// shape set before and any pending shift.
func (s *Sim) SetShape(sh Shape) error {
	return s.ShiftTo(Change{Shape: &sh})
}

// SetScenario switches the injected cause now: the engine takes the
// scenario's configuration and the load generator its traffic (requests in
// flight run to their end). A shape or a pending shift is dropped.
func (s *Sim) SetScenario(name string) error {
	return s.ShiftTo(Change{Scenario: name})
}

// ShiftTo applies c now, or schedules it when c.After > 0. At most one shift
// is pending: whatever is applied or scheduled replaces it (the latest
// instruction wins). The target traffic is validated up front, so a
// scheduled shift cannot fail when it lands.
func (s *Sim) ShiftTo(c Change) error {
	if c.After < 0 {
		return fmt.Errorf("vllmsim: shift after %v: want >= 0", c.After)
	}
	if c.Scenario == "" && c.Shape == nil {
		return errors.New("vllmsim: shift: nothing to change (no scenario, no shape)")
	}
	var shape *Shape
	if c.Shape != nil {
		if err := c.Shape.validateShape(); err != nil {
			return fmt.Errorf("vllmsim: %w", err)
		}
		shape = new(c.Shape.clone())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.scenario
	if c.Scenario != "" {
		var err error
		if sc, err = LookupScenario(c.Scenario); err != nil {
			return fmt.Errorf("vllmsim: %w", err)
		}
	}
	if err := s.loadFor(sc, shape).validate(s.opts.EngineConfig.MaxModelLen); err != nil {
		return fmt.Errorf("vllmsim: %s: %w", sc.Name, err)
	}
	if c.After == 0 {
		s.pending = nil
		s.apply(sc, shape)
		s.opts.Logger.Info("Scenario switched.", s.changeFields(sc, shape)...)
		return nil
	}
	s.pending = &pendingShift{scenario: sc, shape: shape, at: s.eng.now + c.After}
	s.opts.Logger.Info("Shift scheduled.", append(s.changeFields(sc, shape), zap.Time("at", s.wall(s.pending.at)))...)
	return nil
}

// CancelShift drops the pending shift; it reports whether there was one.
func (s *Sim) CancelShift() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	had := s.pending != nil
	s.pending = nil
	return had
}

// applyPending lands the pending shift at its time. Callers hold mu, with
// the engine clock at p.at.
func (s *Sim) applyPending() {
	p := s.pending
	s.pending = nil
	from := s.scenario.Name
	s.apply(p.scenario, p.shape)
	s.opts.Logger.Info("Scenario shifted.", append(s.changeFields(p.scenario, p.shape), zap.String("from", from))...)
}

// apply makes sc (with shape over its load) the state now. Callers hold mu.
func (s *Sim) apply(sc Scenario, shape *Shape) {
	if s.scenario.Name != "" {
		s.previous = s.scenario.Name
	}
	s.scenario, s.shape, s.since = sc, shape, s.eng.now
	s.eng.configure(s.opts.EngineConfig, sc)
	s.load.reset(s.effectiveLoad(), s.eng.now)
	if !s.eng.inflight {
		s.eng.startStep()
	}
}

func (s *Sim) changeFields(sc Scenario, shape *Shape) []zap.Field {
	f := []zap.Field{zap.String("scenario", sc.Name)}
	if shape != nil {
		b, _ := json.Marshal(shape)
		f = append(f, zap.String("shape", string(b)))
	}
	return f
}

// pendingReport is the pending shift for State. Callers hold mu.
func (s *Sim) pendingReport() *PendingShift {
	if s.pending == nil {
		return nil
	}
	return &PendingShift{Scenario: s.pending.scenario.Name, Shape: cloneShape(s.pending.shape), At: s.wall(s.pending.at)}
}

func cloneShape(sh *Shape) *Shape {
	if sh == nil {
		return nil
	}
	return new(sh.clone())
}

// clone copies sh deeply, so a caller editing its values later changes
// nothing here.
func (sh Shape) clone() Shape {
	d := func(x *DistShape) *DistShape {
		if x == nil {
			return nil
		}
		return &DistShape{Mean: cp(x.Mean), Min: cp(x.Min), Max: cp(x.Max), Sigma: cp(x.Sigma)}
	}
	return Shape{
		RPS: cp(sh.RPS), Concurrency: cp(sh.Concurrency), RampUp: cp(sh.RampUp), ThinkTime: cp(sh.ThinkTime),
		PromptTokens: d(sh.PromptTokens), OutputTokens: d(sh.OutputTokens), MaxTokens: cp(sh.MaxTokens),
		Timeout: d(sh.Timeout), SharedPrefix: cp(sh.SharedPrefix),
	}
}

func cp[T any](p *T) *T {
	if p == nil {
		return nil
	}
	return new(*p)
}
