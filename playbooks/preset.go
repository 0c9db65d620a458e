package playbooks

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// Preset is a named list of steps, written once under a file's presets: and
// included by any playbook of the set with `- use: <name>`: the shared PromQL
// snapshot, scrape and triage of the shipped vLLM playbooks, for example.
type Preset struct {
	Name        string
	Description string
	File        string
	Line, Col   int
	// Steps are parsed and checked once, here; a use copies them.
	Steps []*Step
	// source is the preset's own lines, dedented to a list item at column 1,
	// for the self-contained source of each playbook that uses it.
	source string
}

// useSite is one `- use:` of a playbook: which preset, where, and its with: vars.
type useSite struct {
	preset    *Preset
	line, col int
	with      []Var
}

// presets holds the presets of a set by name.
type presets map[string]*Preset

// add registers a file's presets, returning an error for each name already taken.
func (r presets) add(ps []*Preset) yamlerr.List {
	var errs yamlerr.List
	for _, ps := range ps {
		if prev, dup := r[ps.Name]; dup {
			errs = append(errs, &yamlerr.Error{File: ps.File, Line: ps.Line, Col: ps.Col,
				Msg: fmt.Sprintf("duplicate preset name %q (first at %s:%d)", ps.Name, prev.File, prev.Line)})
			continue
		}
		r[ps.Name] = ps
	}
	return errs
}

func (r presets) names() string {
	var out []string
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none defined"
	}
	return strings.Join(out, ", ")
}

// preset parses one item of presets:. Its steps are checked as a playbook's
// are, except what depends on the playbook using it (unique ids across the
// playbook, the steps a when refers to): that is checked at each use.
func (p *fileParser) preset(n ast.Node) *Preset {
	if _, ok := n.(ast.MapNode); !ok {
		p.errorf(n, "a preset must be a mapping with a name and steps")
		return nil
	}
	var spec PresetSpec
	if ok, _ := p.decode(n, &spec, "preset"); !ok {
		return nil
	}
	tk := keyOf(n).GetToken()
	ps := &Preset{Name: spec.Name, Description: spec.Description, File: p.file,
		Line: tk.Position.Line, Col: tk.Position.Column}
	if !presetName(spec.Name) {
		p.errorf(orNode(child(n, "name"), n), "preset: name %q: want letters, digits, '-', '_' and '.', starting with a letter or digit", spec.Name)
		return nil
	}
	if len(spec.Steps) == 0 {
		p.errorf(orNode(child(n, "steps"), n), "preset %q: steps: at least one step is required", spec.Name)
	}
	ids := map[string]*Step{}
	for _, sn := range spec.Steps {
		if u := child(sn, "use"); u != nil {
			p.errorf(keyNode(sn, "use"), "preset %q: a preset's steps are plain steps: use: is allowed in a playbook's steps only", spec.Name)
			continue
		}
		st := p.step(sn, nil)
		if st == nil {
			continue
		}
		st.Preset = spec.Name
		if prev, dup := ids[st.ID]; dup {
			p.errorf(child(sn, "id"), "duplicate step id %q (first at line %d)", st.ID, prev.Line)
			continue
		}
		ids[st.ID] = st
		p.whenSyntax(st)
		ps.Steps = append(ps.Steps, st)
	}
	return ps
}

// presetSource cuts the i-th preset out of the file as one list item at column 1.
func (p *fileParser) presetSource(items []ast.Node, i int) string {
	body := p.cut(items, i, "presets")
	first, _, _ := strings.Cut(body, "\n")
	indent := len(first) - len(strings.TrimLeft(first, " "))
	lines := strings.SplitAfter(body, "\n")
	for j, l := range lines {
		k := 0
		for k < indent && k < len(l) && l[k] == ' ' {
			k++
		}
		lines[j] = l[k:]
	}
	return strings.Join(lines, "")
}

// steps parses a playbook's steps: its own, and those of the presets it uses,
// in the order written. Step ids must be unique after expansion.
func (p *fileParser) steps(pb *Playbook, nodes []ast.Node) {
	ids := map[string]*Step{}
	for _, sn := range nodes {
		var got []*Step
		var at ast.Node // where a duplicate id is reported
		if child(sn, "use") != nil {
			got, at = p.use(sn, pb), child(sn, "use")
		} else if st := p.step(sn, pb); st != nil {
			got, at = []*Step{st}, child(sn, "id")
		}
		for _, st := range got {
			if prev, dup := ids[st.ID]; dup {
				if prev.use == nil && st.use == nil {
					p.errorf(at, "duplicate step id %q (first at line %d)", st.ID, prev.Line)
				} else {
					p.errorf(at, "duplicate step id %q: %s, and %s", st.ID, p.where(prev), p.where(st))
				}
				continue
			}
			ids[st.ID] = st
			pb.Steps = append(pb.Steps, st)
		}
	}
}

// where says where a step of a playbook comes from.
func (p *fileParser) where(st *Step) string {
	if st.use == nil {
		return fmt.Sprintf("step at line %d", st.Line)
	}
	return fmt.Sprintf("step of preset %q (%s:%d) used at line %d", st.Preset, st.File, st.Line, st.use.line)
}

// use expands one `- use: <preset>` item of a playbook's steps into copies of
// the preset's steps, which see the item's with: vars on top of the playbook's.
func (p *fileParser) use(n ast.Node, pb *Playbook) []*Step {
	var spec UseSpec
	if ok, _ := p.decode(n, &spec, "use"); !ok {
		return nil
	}
	un := child(n, "use")
	ps, ok := p.reg[spec.Use]
	if !ok {
		if p.complete {
			p.errorf(un, "playbook %q: unknown preset %q (known: %s)", pb.Name, spec.Use, p.reg.names())
		}
		return nil
	}
	tk := un.GetToken()
	site := &useSite{preset: ps, line: tk.Position.Line, col: tk.Position.Column, with: p.vars("with", spec.With)}
	if !slices.Contains(pb.uses, ps) {
		pb.uses = append(pb.uses, ps)
	}
	out := make([]*Step, len(ps.Steps))
	for i, st := range ps.Steps {
		c := *st
		if st.When != nil { // each playbook compiles and checks its own copy
			c.When = &Condition{Source: st.When.Source}
		}
		c.use = site
		out[i] = &c
	}
	return out
}

// presetsSource is the presets: block of a playbook's self-contained source:
// every preset it uses, in the order of first use.
func (pb *Playbook) presetsSource() string {
	if len(pb.uses) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("presets:\n")
	for _, ps := range pb.uses {
		b.WriteString(ps.source)
	}
	return b.String()
}

// verify parses each playbook's own source, as Rebuild will for a resumed run,
// and reports a playbook that would not come back the same: same digest, same
// steps. It turns a failure on resume (say, an alias to an anchor outside the
// playbook) into a load error. It runs on a set that loaded without errors.
func verify(pbs []*Playbook) error {
	var errs yamlerr.List
	for _, pb := range pbs {
		if why := rebuildsSame(pb); why != "" {
			errs = append(errs, &yamlerr.Error{File: pb.File, Line: pb.Line, Col: pb.Col,
				Msg: fmt.Sprintf("playbook %q cannot be rebuilt from its own text, as a resumed run must: %s", pb.Name, why)})
		}
	}
	return errs.Err()
}

// rebuildsSame says why the playbook's source does not rebuild it, or "".
func rebuildsSame(pb *Playbook) string {
	again, err := parseSelf(pb.File, pb.Source, false)
	if err != nil {
		return strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	i := slices.IndexFunc(again.playbooks, func(o *Playbook) bool { return o.Name == pb.Name })
	if i < 0 {
		return "it is not in its cut-out text"
	}
	o := again.playbooks[i]
	if o.Digest != pb.Digest {
		return "its text does not cut out the same way twice"
	}
	if len(o.Steps) != len(pb.Steps) {
		return fmt.Sprintf("%d steps instead of %d", len(o.Steps), len(pb.Steps))
	}
	for i, st := range pb.Steps {
		if os := o.Steps[i]; os.ID != st.ID || os.Kind != st.Kind || os.Tier != st.Tier || !reflect.DeepEqual(os.config, st.config) {
			return fmt.Sprintf("step %d is %s (%s), not %s (%s)", i+1, os.ID, os.Kind, st.ID, st.Kind)
		}
	}
	return ""
}

// presetName says whether s can name a preset.
func presetName(s string) bool {
	for i, r := range s {
		alnum := (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if alnum || (i > 0 && (r == '-' || r == '_' || r == '.')) {
			continue
		}
		return false
	}
	return s != ""
}
