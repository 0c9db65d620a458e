package playbooks

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// Matches says whether an alert with these labels matches the playbook's matchers.
func (pb *Playbook) Matches(ls template.KV) bool {
	return len(Match([]*Playbook{pb}, ls)) == 1
}

// Plan renders and builds the playbook for one alert. It never fails as a whole:
// a template that cannot render (a label the alert lacks) or a rendered config the
// kind refuses becomes that step's RenderErr, which the run reports.
func (pb *Playbook) Plan(alert template.Alert, w vocab.Window) *Plan {
	data := NewTemplateData(alert, w)
	varErr := pb.renderVars(data) // a var that failed is absent: only steps using it fail
	plan := &Plan{Playbook: pb.Name, File: pb.File, Line: pb.Line, Digest: pb.Digest,
		Source: pb.Source, Timeout: pb.Timeout, Cooldown: pb.Cooldown, MaxConcurrent: pb.MaxConcurrent, Silence: pb.SilenceMatchers,
		Steps: make([]PlannedStep, 0, len(pb.Steps))}
	if pb.Cooldown > 0 {
		plan.CooldownKey = pb.cooldownKey(alert.Labels, "")
	}
	if pb.Notify != nil {
		plan.Channel = pb.Notify.Channel
	}
	uses := map[*useSite]*TemplateData{}
	for _, st := range pb.Steps {
		d, dErr := data, varErr
		if st.use != nil && len(st.use.with) > 0 {
			if uses[st.use] == nil {
				uses[st.use] = withVars(data, st.use)
			}
			d = uses[st.use]
			dErr = errors.Join(varErr, d.varErr)
		}
		ps := PlannedStep{ID: st.ID, Kind: st.Kind, Tier: st.Tier, Timeout: st.Timeout,
			ContinueOnError: st.ContinueOnError, When: st.When, Cooldown: st.Cooldown}
		if st.Cooldown > 0 {
			ps.CooldownKey = pb.cooldownKey(alert.Labels, st.ID)
		}
		ps.Config, ps.Step, ps.RenderErr = st.plan(pb.Name, d)
		if ps.RenderErr != nil && dErr != nil {
			ps.RenderErr = vocab.Errorf(vocab.ReasonBadConfig, "%w (because %w)", ps.RenderErr, dErr)
		}
		plan.Steps = append(plan.Steps, ps)
	}
	return plan
}

// plan renders one step's config and builds it.
func (st *Step) plan(playbook string, data *TemplateData) (any, vocab.Step, error) {
	tree, err := renderTree(st.config, st.templates, data)
	if err != nil {
		return nil, nil, vocab.Errorf(vocab.ReasonBadConfig, "playbook %s: step %s: %s: %w", playbook, st.ID, st.Kind, err)
	}
	cfg, step, err := st.build(tree)
	if err != nil {
		return cfg, nil, vocab.Errorf(vocab.ReasonBadConfig, "playbook %s: step %s: %s: %w", playbook, st.ID, st.Kind, err)
	}
	return cfg, step, nil
}

// withVars is the template data of one use: of a preset: the playbook's vars
// with the use's with: vars rendered on top, in order (each sees those above
// it). A with: var that fails is left out, as a playbook var is.
func withVars(data *TemplateData, u *useSite) *TemplateData {
	d := *data
	d.Vars = make(map[string]string, len(data.Vars)+len(u.with))
	for k, v := range data.Vars {
		d.Vars[k] = v
	}
	for _, v := range u.with { // a with: var that fails must not fall back to the playbook's
		delete(d.Vars, v.Name)
	}
	d.varErr = renderVars("with", u.with, &d)
	return &d
}

// renderVars renders the vars in order into data.Vars; a var sees those above it.
// A var that fails is left out (so is one built on it), and its error returned:
// a step that uses it then fails to render, the others run (triage still
// answers when the alert lacks the label a snapshot needs).
func (pb *Playbook) renderVars(data *TemplateData) error { return renderVars("vars", pb.Vars, data) }

func renderVars(what string, vars []Var, data *TemplateData) error {
	var failed []string // one line, for the thread
	for _, v := range vars {
		s, err := v.tmpl.render(data)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s.%s: %v", what, v.Name, err))
			continue
		}
		data.Vars[v.Name] = s
	}
	if len(failed) == 0 {
		return nil
	}
	return errors.New(strings.Join(failed, "; "))
}

// cooldownKey identifies "the same alert" for cooldowns: the playbook (and step)
// with the values of the cooldown_by labels, in the order written.
func (pb *Playbook) cooldownKey(ls template.KV, step string) string {
	var b strings.Builder
	b.WriteString(pb.Name)
	if step != "" {
		b.WriteString("/" + step)
	}
	by := pb.CooldownBy
	if len(by) == 0 {
		by = []string{}
		for k := range ls {
			by = append(by, k)
		}
		sort.Strings(by)
	}
	for i, l := range by {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		fmt.Fprintf(&b, "%s%s=%q", sep, l, ls[l])
	}
	if len(by) > 0 {
		b.WriteString("}")
	}
	return b.String()
}
