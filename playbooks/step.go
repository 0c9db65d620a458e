package playbooks

import (
	"fmt"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/yamlerr"
	"github.com/autocapture/autocapture/vocab"
)

// Step is one parsed step of a playbook.
type Step struct {
	ID              string
	Kind            string
	Tier            vocab.Tier
	Timeout         time.Duration
	Cooldown        time.Duration
	ContinueOnError bool
	// When is nil for a step that always runs.
	When *Condition
	// File and Line say where the step is written: its playbook's file, or its
	// preset's (then Preset names it).
	File   string
	Line   int
	Preset string

	kind vocab.Kind
	// config is the step's kind config as a plain value tree, templates unrendered.
	config any
	// templates holds every template string of config, parsed, by its text.
	templates map[string]*tmpl
	whenNode  ast.Node
	// use is the playbook's use: that brought in this copy of a preset's step.
	use *useSite
}

// step parses one item of a playbook's steps:.
func (p *fileParser) step(n ast.Node, pb *Playbook) *Step {
	m, ok := n.(ast.MapNode)
	if !ok {
		p.errorf(n, "a step must be a mapping with an id and one kind key")
		return nil
	}
	fixed, kindKey, kindVal := p.splitStep(n, m)
	if fixed == nil {
		return nil
	}
	var spec StepSpec
	if ok, _ := p.decode(fixed, &spec, "step"); !ok && spec.ID == "" {
		return nil // its kind config is still checked below when its id fitted
	}
	st := &Step{ID: spec.ID, Timeout: spec.Timeout, Cooldown: spec.Cooldown,
		ContinueOnError: spec.ContinueOnError, File: p.file, Line: keyOf(n).GetToken().Position.Line}
	if spec.ID == "" {
		p.errorf(n, "step: id is required")
		return nil
	}
	if !stepID(spec.ID) {
		p.errorf(child(n, "id"), "step id %q: want lower case letters, digits and _ (it is read as steps.%s)", spec.ID, spec.ID)
	}
	if kindKey == nil {
		p.errorf(n, "step %q: no kind: want one of %s", spec.ID, strings.Join(capture.Kinds(), ", "))
		return nil
	}
	st.Kind = kindKey.GetToken().Value
	k, ok := capture.Lookup(st.Kind)
	if !ok {
		p.errorf(kindKey, "step %q: unknown step kind %q (known: %s)", spec.ID, st.Kind, strings.Join(capture.Kinds(), ", "))
		return nil
	}
	st.kind = k
	st.Tier = k.Tier
	if spec.Tier != nil {
		t, err := vocab.ParseTier(spec.Tier.GetToken().Value)
		if err != nil {
			p.errorf(spec.Tier, "step %q: %v", spec.ID, err)
		}
		st.Tier = t
	}
	if spec.Timeout < 0 {
		p.errorf(child(n, "timeout"), "step %q: timeout must not be negative", spec.ID)
	}
	if spec.Cooldown != 0 && !k.Cooldown {
		p.errorf(child(n, "cooldown"), "step %q: kind %s takes no step cooldown", spec.ID, st.Kind)
	}
	if spec.When != "" {
		st.When = &Condition{Source: spec.When}
		st.whenNode = child(n, "when")
	}
	p.kindConfig(st, kindVal)
	return st
}

// splitStep separates a step's fixed keys from its one kind key. It returns a
// mapping node holding only the fixed keys.
func (p *fileParser) splitStep(n ast.Node, m ast.MapNode) (fixed ast.Node, kindKey, kindVal ast.Node) {
	out := &ast.MappingNode{BaseNode: &ast.BaseNode{}}
	if mn, ok := n.(*ast.MappingNode); ok {
		out.Start, out.End, out.IsFlowStyle = mn.Start, mn.End, mn.IsFlowStyle
	} else {
		out.Start = n.GetToken()
	}
	for it := m.MapRange(); it.Next(); {
		key := it.Key().GetToken().Value
		if stepFields[key] {
			out.Values = append(out.Values, &ast.MappingValueNode{BaseNode: &ast.BaseNode{},
				Start: it.Key().GetToken(), Key: it.Key(), Value: it.Value()})
			continue
		}
		if kindKey != nil {
			p.errorf(it.Key(), "step has two kind keys, %q and %q: exactly one is allowed", kindKey.GetToken().Value, key)
			return nil, nil, nil
		}
		kindKey, kindVal = it.Key(), it.Value()
	}
	return out, kindKey, kindVal
}

// kindConfig checks a step's kind config at load time: strict decoding of the
// unrendered config (unknown fields, types), every template parsed, and the
// kind's Build when no template is involved.
func (p *fileParser) kindConfig(st *Step, n ast.Node) {
	st.templates = map[string]*tmpl{}
	if n == nil || n.Type() == ast.NullType {
		st.config = map[string]any{}
	} else {
		if ok, _ := p.decode(n, st.kind.Config(), st.Kind); !ok {
			return
		}
		if err := yamlerr.NodeToValue(n, &st.config); err != nil {
			p.errorf(n, "step %q: %v", st.ID, err)
			return
		}
		ast.Walk(walker(func(sn ast.Node) {
			s, ok := sn.(*ast.StringNode)
			if !ok || !strings.Contains(s.Value, "{{") {
				return
			}
			t, err := parseTemplate(st.ID, s.Value)
			if err != nil {
				p.errorf(sn, "step %q: %v", st.ID, err)
				return
			}
			st.templates[s.Value] = t
		}), n)
	}
	if len(st.templates) > 0 {
		return
	}
	if _, _, err := st.build(st.config); err != nil {
		p.errorf(orNode(n, nil), "step %q: %s: %v", st.ID, st.Kind, err)
	}
}

// build decodes a (rendered) config tree strictly into the kind's config and builds the step.
func (st *Step) build(tree any) (any, vocab.Step, error) {
	cfg := st.kind.Config()
	b, err := yaml.Marshal(tree)
	if err != nil {
		return nil, nil, fmt.Errorf("encode config: %w", err)
	}
	if err := yaml.UnmarshalWithOptions(b, cfg, yaml.Strict()); err != nil {
		return nil, nil, fmt.Errorf("decode config: %s", yaml.FormatError(err, false, false))
	}
	step, err := st.kind.Build(cfg)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, step, nil
}

type walker func(ast.Node)

func (w walker) Visit(n ast.Node) ast.Visitor {
	w(n)
	return w
}

// stepID says whether s can be read as steps.<s> in an expression.
func stepID(s string) bool {
	for i, r := range s {
		if r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return s != ""
}
