package playbooks

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/prometheus/alertmanager/matcher/parse"
	"github.com/prometheus/alertmanager/pkg/labels"

	"github.com/autocapture/autocapture/internal/yamlerr"
)

// Playbook is one parsed, validated playbook, ready to be planned for an alert.
type Playbook struct {
	Name        string
	Description string
	File        string
	Line, Col   int
	// Match holds the parsed matchers; all must hold.
	Match         labels.Matchers
	Continue      bool
	Timeout       time.Duration
	Cooldown      time.Duration
	CooldownBy    []string
	MaxConcurrent int
	Notify        *NotifySpec
	// SilenceMatchers are the alert labels a silence made from the
	// playbook's thread matches (silence.matchers); nil: the daemon's default.
	SilenceMatchers []string
	Vars            []Var
	Steps           []*Step
	// uses are the presets the steps include, in order of first use.
	uses []*Preset
	// Source is the playbook's own YAML (a one-playbook file, with the presets
	// it uses); Digest its sha256.
	Source []byte
	Digest string
}

// Var is one playbook variable, rendered once per run in file order (a var may
// read the vars above it).
type Var struct {
	Name string
	tmpl *tmpl
}

// rawFile is the top level of a playbook file, items kept as nodes for positions.
type rawFile struct {
	Playbooks []ast.Node `yaml:"playbooks"`
	Presets   []ast.Node `yaml:"presets"`
	Tests     []ast.Node `yaml:"tests"`
}

// parsed is one file's playbooks and tests.
type parsed struct {
	playbooks []*Playbook
	tests     []*TestCase
}

// parseFile parses and validates one self-contained playbook file: a use: names
// a preset of the same file. Every problem found is reported, each as file:line:col.
func parseFile(file string, data []byte) (*parsed, error) {
	return parseSelf(file, data, true)
}

// parseSelf is parseFile; check says whether each playbook's own source is
// checked to rebuild it (see verify).
func parseSelf(file string, data []byte, check bool) (*parsed, error) {
	u, err := readFile(file, data)
	if err != nil {
		return nil, err
	}
	reg := presets{}
	u.errs = append(u.errs, reg.add(u.presets)...)
	p, err := u.finish(reg, true)
	if err == nil && check {
		err = verify(p.playbooks)
	}
	return p, err
}

// readFile parses a file's YAML and its presets; its playbooks and tests wait
// for finish, once the presets of every file of the set are known.
func readFile(file string, data []byte) (*fileParser, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlerr.FromParse(file, data, err)
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &yamlerr.Error{File: file, Line: 1, Col: 1, Msg: "want one YAML document with a playbooks: list"}
	}
	p := &fileParser{file: file, f: f, lines: splitLines(string(data))}
	if errs, _ := yamlerr.Decode(f.Docs[0].Body, &p.raw, yamlerr.Options{File: file, AST: f, Root: "the file"}); len(errs) > 0 {
		return nil, errs
	}
	p.section = "presets"
	for i, n := range p.raw.Presets {
		if ps := p.preset(n); ps != nil {
			ps.source = p.presetSource(p.raw.Presets, i)
			p.presets = append(p.presets, ps)
		}
	}
	return p, nil
}

// finish parses the file's playbooks and tests; a use: resolves in reg. With
// complete false some file of the set could not be read, so an unknown preset
// is not reported (it may be that file's).
func (p *fileParser) finish(reg presets, complete bool) (*parsed, error) {
	p.reg, p.complete = reg, complete
	out := &parsed{}
	seen := map[string]*Playbook{}
	p.section = "playbooks"
	for i, n := range p.raw.Playbooks {
		pb := p.playbook(n)
		if pb == nil {
			continue
		}
		if prev, dup := seen[pb.Name]; dup {
			p.errorf(child(n, "name"), "duplicate playbook name %q (first at line %d)", pb.Name, prev.Line)
			continue
		}
		seen[pb.Name] = pb
		pb.Source = []byte(p.source(p.raw.Playbooks, i) + pb.presetsSource())
		sum := sha256.Sum256(pb.Source)
		pb.Digest = hex.EncodeToString(sum[:])
		out.playbooks = append(out.playbooks, pb)
	}
	p.section = "tests"
	for _, n := range p.raw.Tests {
		if tc := p.testCase(n, out.playbooks); tc != nil {
			out.tests = append(out.tests, tc)
		}
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// fileParser collects the problems of one file.
type fileParser struct {
	file  string
	f     *ast.File
	lines []string
	raw   rawFile
	errs  yamlerr.List
	// section is the top-level key being parsed, where a problem of a node
	// without a position is placed.
	section string
	// presets are the file's own; reg those of the whole set (see finish).
	presets  []*Preset
	reg      presets
	complete bool
}

func (p *fileParser) errorf(n ast.Node, format string, args ...any) {
	p.add(yamlerr.At(p.file, keyOf(n), format, args...))
}

// add records a problem; one without a position (a node without a token, such
// as an empty list item) is placed at the key of the list being parsed.
func (p *fileParser) add(e *yamlerr.Error) {
	if e.Line == 0 {
		e.Line, e.Col = 1, 1
		if k := keyNode(p.f.Docs[0].Body, p.section); k != nil && k.GetToken() != nil && k.GetToken().Position != nil {
			e.Line, e.Col = k.GetToken().Position.Line, k.GetToken().Position.Column
		}
	}
	p.errs = append(p.errs, e)
}

// keyOf returns the node whose position stands for n: a mapping's token is its
// first ':', so a mapping is placed at its first key.
func keyOf(n ast.Node) ast.Node {
	switch m := n.(type) {
	case *ast.MappingNode:
		if len(m.Values) > 0 {
			return m.Values[0].Key
		}
	case *ast.MappingValueNode:
		return m.Key
	}
	return n
}

// decode decodes n strictly into v with the config's decoder, recording
// every problem at its place; path names n in the messages (playbook,
// scrape). On a problem v keeps its values that were well typed, the others
// as they were, and bad lists the key paths refused.
func (p *fileParser) decode(n ast.Node, v any, path string) (ok bool, bad []string) {
	rv := reflect.ValueOf(v).Elem()
	init := reflect.New(rv.Type()).Elem()
	init.Set(rv)
	errs, bad := yamlerr.Decode(n, v, yamlerr.Options{File: p.file, AST: p.f, Path: path,
		Reset: func() { rv.Set(init) }})
	for _, e := range errs {
		p.add(e)
	}
	return len(errs) == 0, bad
}

// playbook parses one item of playbooks:.
func (p *fileParser) playbook(n ast.Node) *Playbook {
	var spec PlaybookSpec
	if _, ok := n.(*ast.MappingNode); !ok {
		if _, ok := n.(*ast.MappingValueNode); !ok {
			p.errorf(n, "a playbook must be a mapping")
			return nil
		}
	}
	// A playbook with a refused value goes on being checked with the values
	// that fitted, so one mistake hides none of its steps' (the file fails).
	_, bad := p.decode(n, &spec, "playbook")
	tk := keyOf(n).GetToken()
	pb := &Playbook{Name: spec.Name, Description: spec.Description, File: p.file,
		Line: tk.Position.Line, Col: tk.Position.Column, Continue: spec.Continue,
		Timeout: spec.Timeout, Cooldown: spec.Cooldown, CooldownBy: spec.CooldownBy,
		MaxConcurrent: spec.MaxConcurrent, Notify: spec.Notify}
	if spec.Name == "" && !slices.Contains(bad, "playbook.name") {
		p.errorf(n, "playbook: name is required")
	}
	p.matchers(pb, child(n, "match"), spec.Match)
	p.limits(pb, n, &spec)
	p.silence(pb, n, spec.Silence)
	pb.Vars = p.vars("vars", spec.Vars)
	if len(spec.Steps) == 0 && !slices.Contains(bad, "playbook.steps") {
		p.errorf(orNode(child(n, "steps"), n), "playbook %q: steps: at least one step is required", spec.Name)
	}
	p.steps(pb, spec.Steps)
	p.conditions(pb)
	return pb
}

// matchers parses the match: entries with Alertmanager's own parser.
func (p *fileParser) matchers(pb *Playbook, seq ast.Node, srcs []string) {
	for i, s := range srcs {
		ms, err := parse.Matchers(s)
		if err != nil {
			p.errorf(item(seq, i), "bad matcher %q: %v", s, err)
			continue
		}
		pb.Match = append(pb.Match, ms...)
	}
}

// limits checks the run limits and the notify block.
func (p *fileParser) limits(pb *Playbook, n ast.Node, spec *PlaybookSpec) {
	if spec.Timeout < 0 {
		p.errorf(child(n, "timeout"), "timeout must not be negative")
	}
	if spec.Cooldown < 0 {
		p.errorf(child(n, "cooldown"), "cooldown must not be negative")
	}
	if len(spec.CooldownBy) > 0 && spec.Cooldown == 0 {
		p.errorf(child(n, "cooldown_by"), "cooldown_by needs a cooldown")
	}
	for i, l := range spec.CooldownBy {
		if !labelName(l) {
			p.errorf(item(child(n, "cooldown_by"), i), "bad label name %q", l)
		}
	}
	if spec.MaxConcurrent < 0 {
		p.errorf(child(n, "max_concurrent"), "max_concurrent must not be negative")
	}
	if nt := spec.Notify; nt != nil {
		nn := child(n, "notify")
		if nt.Channel == "" {
			p.errorf(nn, "notify: channel is required")
		}
		if nt.Thread == "" {
			nt.Thread = threadModes[0]
		}
		if !slices.Contains(threadModes, nt.Thread) {
			p.errorf(orNode(child(nn, "thread"), nn), "notify: thread: want %s, got %q", strings.Join(threadModes, " or "), nt.Thread)
		}
	}
}

// silenceNeeds is the label every silence: matchers list names: a silence
// made from one alert's thread must not silence other alerts on the same
// instance or model (a node-down page beside the KV-cache one).
const silenceNeeds = "alertname"

// labelNamePattern is a Prometheus label name (labelName), for the schema.
const labelNamePattern = "^[a-zA-Z_][a-zA-Z0-9_]*$"

// silence checks the silence block: at least one matcher, each a label
// name once, alertname among them.
func (p *fileParser) silence(pb *Playbook, n ast.Node, spec *SilenceSpec) {
	sn := child(n, "silence")
	if spec == nil {
		if sn != nil { // "silence:" with nothing under it
			p.errorf(keyNode(n, "silence"), "silence: want matchers: [alertname, ...] under it, or no silence: at all for the default")
		}
		return
	}
	mn := orNode(child(sn, "matchers"), sn)
	if len(spec.Matchers) == 0 {
		p.errorf(mn, "silence: matchers: name at least one label (alertname, instance, model_name by default); "+
			"a silence without matchers would silence every alert")
		return
	}
	first := map[string]int{}
	for i, l := range spec.Matchers {
		switch j, dup := first[l]; {
		case !labelName(l):
			p.errorf(item(mn, i), "silence: matchers: bad label name %q", l)
		case dup:
			p.errorf(item(mn, i), "silence: matchers: %q is listed twice (first as item %d)", l, j+1)
		default:
			first[l] = i
		}
	}
	if _, ok := first[silenceNeeds]; !ok {
		p.errorf(mn, "silence: matchers: must include %s, so that a silence made from this alert's thread "+
			"silences no other alert", silenceNeeds)
	}
	pb.SilenceMatchers = spec.Matchers
}

// vars parses the vars: mapping, keeping its order, and parses each template.
func (p *fileParser) vars(what string, n ast.Node) []Var {
	if n == nil || n.Type() == ast.NullType {
		return nil
	}
	m, ok := n.(ast.MapNode)
	if !ok {
		p.errorf(n, "%s: want a mapping of name: template", what)
		return nil
	}
	var out []Var
	for it := m.MapRange(); it.Next(); {
		name := it.Key().GetToken().Value
		s, ok := it.Value().(*ast.StringNode)
		if !ok {
			if it.Value().Type() == ast.NullType {
				s = &ast.StringNode{Value: ""}
			} else {
				s = &ast.StringNode{Value: it.Value().GetToken().Value}
			}
		}
		t, err := parseTemplate(what+"."+name, s.Value)
		if err != nil {
			p.errorf(it.Value(), "%s.%s: %v", what, name, err)
			continue
		}
		out = append(out, Var{Name: name, tmpl: t})
	}
	return out
}

// source cuts the i-th playbook's lines out of the file, as a file of its own.
func (p *fileParser) source(items []ast.Node, i int) string {
	return "playbooks:\n" + p.cut(items, i, "playbooks")
}

// cut returns the lines of the i-th item of the top-level list under key: up to
// the next item, the next top-level key or the end of the file.
func (p *fileParser) cut(items []ast.Node, i int, key string) string {
	start := items[i].GetToken().Position.Line
	end := len(p.lines) + 1
	if i+1 < len(items) {
		end = items[i+1].GetToken().Position.Line
	} else if next := p.after(key); next > 0 {
		end = next
	}
	start = min(max(start, 1), len(p.lines)+1)
	end = min(max(end, start), len(p.lines)+1)
	body := strings.Join(p.lines[start-1:end-1], "")
	return strings.TrimRight(body, " \t\n") + "\n"
}

// splitLines splits s after each line break as YAML counts them (\r\n, \r or
// \n), so that line numbers of the parser index the result.
func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break
		}
		n := i + 1
		if s[i] == '\r' && n < len(s) && s[n] == '\n' {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// after is the line of the first top-level key after key, or 0.
func (p *fileParser) after(key string) int {
	m, ok := p.f.Docs[0].Body.(ast.MapNode)
	if !ok {
		return 0
	}
	after := false
	for it := m.MapRange(); it.Next(); {
		if after {
			return it.Key().GetToken().Position.Line
		}
		after = it.Key().GetToken().Value == key
	}
	return 0
}

// child returns the value node under key in a mapping node, or nil.
func child(n ast.Node, key string) ast.Node {
	m, ok := n.(ast.MapNode)
	if !ok || n == nil {
		return nil
	}
	for it := m.MapRange(); it.Next(); {
		if it.Key().GetToken().Value == key {
			return it.Value()
		}
	}
	return nil
}

// item returns the i-th element of a sequence node, or the node itself.
func item(n ast.Node, i int) ast.Node {
	if s, ok := n.(*ast.SequenceNode); ok && i < len(s.Values) {
		return s.Values[i]
	}
	return n
}

func orNode(n, fallback ast.Node) ast.Node {
	if n == nil {
		return fallback
	}
	return n
}

// labelName says whether s is a valid Prometheus label name.
func labelName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}

// String names the playbook and where it is defined.
func (pb *Playbook) String() string { return fmt.Sprintf("%s (%s:%d)", pb.Name, pb.File, pb.Line) }
