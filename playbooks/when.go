package playbooks

import (
	"errors"
	"fmt"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	yast "github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// whenEnv is the shape `when` expressions are type-checked against (see Env).
var whenEnv = map[string]any{
	"alert": map[string]any{},
	"steps": map[string]any{},
}

// alertFields are the members of alert an expression may read.
var alertFields = map[string]bool{"labels": true, "annotations": true, "status": true,
	"fingerprint": true, "startsAt": true}

// optionalSteps makes every member access optional (a?.b), so that a step which
// did not run reads as nil instead of failing the expression.
type optionalSteps struct{}

func (optionalSteps) Visit(n *ast.Node) {
	if m, ok := (*n).(*ast.MemberNode); ok && !m.Optional {
		m.Optional = true
		ast.Patch(n, &ast.ChainNode{Node: m})
	}
}

// compileWhen compiles a `when` source to a Condition evaluator.
func compileWhen(src string) (*vm.Program, error) {
	return expr.Compile(src, expr.Env(whenEnv), expr.AsBool(), expr.Patch(optionalSteps{}))
}

// CompileCondition compiles a `when` expression outside a playbook file (tests,
// tools) the way the loader does: type-checked against Env's shape as a bool,
// alert.<x> limited to the known fields, every member access optional, and an
// evaluator over Env. What only a playbook can check (that steps.<id> names an
// earlier step) is left to the loader.
func CompileCondition(src string) (*Condition, error) {
	tree, err := expr.Compile(src, expr.Env(whenEnv), expr.AsBool())
	if err != nil {
		return nil, fmt.Errorf("when %q: %w", src, err)
	}
	for _, r := range references(tree.Node()) {
		if r.root == "alert" && !alertFields[r.name] {
			return nil, fmt.Errorf("when %q: alert has no field %q (want labels, annotations, status, fingerprint or startsAt)", src, r.name)
		}
	}
	prog, err := compileWhen(src)
	if err != nil {
		return nil, fmt.Errorf("when %q: %w", src, err)
	}
	return &Condition{Source: src, eval: evaluator(prog)}, nil
}

// conditions compiles every step's `when` and checks what it refers to: alert.<x>
// must be a known field; steps.<id> must be a step of this playbook in an earlier
// tier (it has finished by then).
func (p *fileParser) conditions(pb *Playbook) {
	byID := map[string]*Step{}
	for _, st := range pb.Steps {
		byID[st.ID] = st
	}
	for _, st := range pb.Steps {
		if st.When == nil {
			continue
		}
		tree, err := expr.Compile(st.When.Source, expr.Env(whenEnv), expr.AsBool())
		if err != nil {
			if st.use == nil { // a preset's step: reported once, where it is defined
				p.exprError(st, err)
			}
			continue
		}
		for _, ref := range references(tree.Node()) {
			if st.use == nil || ref.root == "steps" {
				p.checkRef(pb, st, ref, byID)
			}
		}
		prog, err := compileWhen(st.When.Source)
		if err != nil {
			if st.use == nil {
				p.exprError(st, err)
			}
			continue
		}
		st.When.eval = evaluator(prog)
	}
}

// whenSyntax checks a preset step's when on its own: it compiles, and reads
// only known alert fields. The steps it reads are checked at each use.
func (p *fileParser) whenSyntax(st *Step) {
	if st.When == nil {
		return
	}
	tree, err := expr.Compile(st.When.Source, expr.Env(whenEnv), expr.AsBool())
	if err != nil {
		p.exprError(st, err)
		return
	}
	for _, ref := range references(tree.Node()) {
		if ref.root == "alert" {
			p.checkRef(nil, st, ref, nil)
		}
	}
}

// evaluator runs a compiled program over an Env map.
func evaluator(prog *vm.Program) func(map[string]any) (bool, error) {
	return func(env map[string]any) (bool, error) {
		out, err := expr.Run(prog, env)
		if err != nil {
			return false, fmt.Errorf("when: %w", err)
		}
		b, ok := out.(bool)
		if !ok {
			return false, fmt.Errorf("when: got %T, want bool", out)
		}
		return b, nil
	}
}

// ref is a member read off a root identifier: steps.<name> or alert.<name>.
type ref struct {
	root, name string
	loc        file.Location
}

// references finds every literal member access on alert and steps.
func references(n ast.Node) []ref {
	var out []ref
	ast.Walk(&n, visitFunc(func(node *ast.Node) {
		m, ok := (*node).(*ast.MemberNode)
		if !ok {
			return
		}
		id, ok := m.Node.(*ast.IdentifierNode)
		if !ok || (id.Value != "steps" && id.Value != "alert") {
			return
		}
		if s, ok := m.Property.(*ast.StringNode); ok {
			out = append(out, ref{root: id.Value, name: s.Value, loc: m.Property.Location()})
		}
	}))
	return out
}

type visitFunc func(*ast.Node)

func (f visitFunc) Visit(n *ast.Node) { f(n) }

// checkRef reports a reference to a missing alert field or to a step that has not
// finished when this one's `when` is evaluated.
// A preset's step is checked against each playbook that uses it, and the error
// (at the step's when, in the preset's file) names that playbook and the use.
func (p *fileParser) checkRef(pb *Playbook, st *Step, r ref, byID map[string]*Step) {
	var in string
	if st.use != nil {
		in = fmt.Sprintf(" (in playbook %q, which uses preset %q at %s:%d:%d)", pb.Name, st.Preset, p.file, st.use.line, st.use.col)
	}
	switch {
	case r.root == "alert" && !alertFields[r.name]:
		p.whenErrorf(st, r.loc, "when: alert has no field %q (want labels, annotations, status, fingerprint or startsAt)", r.name)
	case r.root == "steps":
		other, ok := byID[r.name]
		switch {
		case !ok:
			p.whenErrorf(st, r.loc, "when: no step %q in playbook%s", r.name, in)
		case other == st:
			p.whenErrorf(st, r.loc, "when: step %q refers to itself", r.name)
		case other.Tier >= st.Tier:
			p.whenErrorf(st, r.loc, "when: step %q runs in tier %s, not before this step's tier %s%s", r.name, other.Tier, st.Tier, in)
		}
	}
}

// exprError reports a compile error at its place inside the when: value.
func (p *fileParser) exprError(st *Step, err error) {
	var fe *file.Error
	if errors.As(err, &fe) {
		p.whenErrorf(st, fe.Location, "when: %s", fe.Message)
		return
	}
	p.whenErrorf(st, file.Location{}, "when: %v", err)
}

// whenErrorf places an error at a location inside the step's when: scalar.
func (p *fileParser) whenErrorf(st *Step, loc file.Location, format string, args ...any) {
	e := p.at(st.whenNode, st.When.Source, loc.From)
	e.File = st.File
	e.Msg = fmt.Sprintf(format, args...)
	p.add(e)
}

// at converts a rune offset inside an expression to a file position, counting
// from the when: scalar (plus its opening quote).
func (p *fileParser) at(n yast.Node, src string, offset int) *yamlerr.Error {
	e := &yamlerr.Error{File: p.file}
	if n == nil || n.GetToken() == nil || n.GetToken().Position == nil {
		return e
	}
	pos := n.GetToken().Position
	e.Line, e.Col = pos.Line, pos.Column
	if t := n.GetToken().Type; t == token.DoubleQuoteType || t == token.SingleQuoteType {
		e.Col++
	}
	line, col := 0, 0
	for i, r := range []rune(src) {
		if i == offset {
			break
		}
		col++
		if r == '\n' {
			line, col = line+1, 0
		}
	}
	if line > 0 {
		e.Line += line
		e.Col = pos.Column + col
		return e
	}
	e.Col += col
	return e
}
