package playbooks

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/internal/yamlerr"
	"github.com/autocapture/autocapture/playbooks/sglang"
	"github.com/autocapture/autocapture/playbooks/vllm"
	"github.com/autocapture/autocapture/vocab"
)

// Set is a loaded, validated set of playbooks, in matching order, with their tests.
// It is immutable once loaded and safe for concurrent use.
type Set struct {
	Playbooks []*Playbook
	Tests     []*TestCase
	Files     []string
	// Replaced names the shipped playbooks and presets a file's of the same
	// name replaced (Sources: layered over the shipped set).
	Replaced []string
}

// Sources says where a set comes from: the files Globs match, in lexical
// order of their paths, layered over the shipped vLLM and SGLang playbooks
// embedded in the binary unless Shipped is false.
//
// Layered: the files' playbooks come first in matching order (an alert that
// one of them matches is routed there, as Alertmanager routes, and reaches a
// shipped playbook only after a continue: true), then the shipped ones. A
// file's playbook or preset named as a shipped one replaces it, so a copy of
// a shipped file edited in place takes its place instead of clashing with
// it. The shipped files' test cases test the shipped set alone: they are
// left out of a layered set (`autocapture test` with no config runs them).
type Sources struct {
	Globs   []string
	Shipped bool
}

// Origins counts the set's playbooks by where they come from: the shipped
// set, and files.
func (s *Set) Origins() (shipped, files int) {
	for _, pb := range s.Playbooks {
		if IsShipped(pb.File) {
			shipped++
		} else {
			files++
		}
	}
	return shipped, files
}

// Summary says what a set holds and from where, in one line:
// "6 playbooks: 1 from files, 5 shipped (replaced by a file's: vllm-high-itl)".
func (s *Set) Summary() string {
	shipped, files := s.Origins()
	var from []string
	if files > 0 {
		from = append(from, fmt.Sprintf("%d from files", files))
	}
	if shipped > 0 {
		from = append(from, fmt.Sprintf("%d shipped", shipped))
	}
	out := fmt.Sprintf("%d playbooks: %s", len(s.Playbooks), strings.Join(from, ", "))
	if len(s.Replaced) > 0 {
		out += " (replaced by a file's: " + strings.Join(s.Replaced, ", ") + ")"
	}
	return out
}

// Shipped is the shipped set alone.
var Shipped = Sources{Shipped: true}

// EmbeddedPrefix names the shipped vLLM playbook files in positions and plans.
const EmbeddedPrefix = "embedded:vllm/"

// EmbeddedSGLangPrefix names the shipped SGLang playbook files.
const EmbeddedSGLangPrefix = "embedded:sglang/"

// shippedFS are the shipped playbook packages, each under its prefix, in
// the order their files load (a preset of one may be used by the other).
var shippedFS = []struct {
	prefix string
	fsys   fs.FS
}{{EmbeddedPrefix, vllm.FS}, {EmbeddedSGLangPrefix, sglang.FS}}

// IsShipped says whether a playbook file is one of the shipped set's.
func IsShipped(file string) bool {
	for _, s := range shippedFS {
		if strings.HasPrefix(file, s.prefix) {
			return true
		}
	}
	return false
}

// Load loads the set src names; see Sources.
func Load(src Sources, log *zap.Logger) (*Set, error) {
	if len(src.Globs) == 0 && !src.Shipped {
		return nil, fmt.Errorf("playbooks: none to load: the shipped set is off (shipped_playbooks: false) and playbooks: names no file")
	}
	var files []string
	seen := map[string]bool{}
	for _, g := range src.Globs {
		if !hasMeta(g) { // a path: say what is wrong with it, not "matches no file"
			if _, err := os.Stat(g); err != nil {
				return nil, fmt.Errorf("playbooks: %w", err)
			}
		}
		m, err := filepath.Glob(g)
		if err != nil {
			return nil, fmt.Errorf("playbooks: glob %q: %w", g, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("playbooks: glob %q matches no file", g)
		}
		for _, f := range m {
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	sort.Strings(files)
	files, err := expand(files)
	if err != nil {
		return nil, err
	}
	var shipped []string
	if src.Shipped {
		for _, sh := range shippedFS {
			names, err := fsFiles(sh.fsys, sh.prefix)
			if err != nil {
				return nil, err
			}
			shipped = append(shipped, names...)
		}
	}
	s, err := build(files, shipped, func(name string) ([]byte, error) {
		for _, sh := range shippedFS {
			if n, ok := strings.CutPrefix(name, sh.prefix); ok {
				return fs.ReadFile(sh.fsys, n)
			}
		}
		return os.ReadFile(name)
	})
	if err == nil {
		log.Debug("Loaded playbooks.", zap.Strings("files", files), zap.Bool("shipped", src.Shipped),
			zap.Strings("replaced", s.Replaced), zap.Int("playbooks", len(s.Playbooks)))
	}
	return s, err
}

// LoadFiles loads playbook files in the order given; a directory stands for its
// *.yaml and *.yml files in lexical order. Every problem of every file is reported.
func LoadFiles(paths []string) (*Set, error) {
	files, err := expand(paths)
	if err != nil {
		return nil, err
	}
	return build(files, nil, func(name string) ([]byte, error) { return os.ReadFile(name) })
}

// hasMeta says whether a glob has any of filepath.Match's special characters.
func hasMeta(g string) bool { return strings.ContainsAny(g, `*?[\\`) }

// expand replaces each directory of paths by its *.yaml and *.yml files, in
// lexical order.
func expand(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("playbooks: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		var in []string
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(p, pat))
			in = append(in, m...)
		}
		sort.Strings(in)
		files = append(files, in...)
	}
	return files, nil
}

// LoadFS loads every *.yaml file at the root of fsys, in lexical order; names in
// errors and plans are prefix + file name.
func LoadFS(fsys fs.FS, prefix string) (*Set, error) {
	files, err := fsFiles(fsys, prefix)
	if err != nil {
		return nil, err
	}
	return build(files, nil, func(name string) ([]byte, error) {
		return fs.ReadFile(fsys, strings.TrimPrefix(name, prefix))
	})
}

// fsFiles names the *.yaml files at the root of fsys, in lexical order,
// each as prefix + its name.
func fsFiles(fsys fs.FS, prefix string) ([]string, error) {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("playbooks: %w", err)
	}
	sort.Strings(names)
	files := make([]string, len(names))
	for i, n := range names {
		files[i] = prefix + n
	}
	return files, nil
}

// build parses each file and checks names are unique across the set. Presets
// are read from every file first: a use: may name a preset of any file.
// shipped are files layered under files (Sources): their presets and
// playbooks that a file's of the same name replaces are left out, and so
// are their tests when files is not empty.
func build(files, shipped []string, read func(string) ([]byte, error)) (*Set, error) {
	s := &Set{Files: append(append([]string{}, files...), shipped...)}
	var errs yamlerr.List
	var units []*fileParser
	reg, complete := presets{}, true
	under := map[*fileParser]bool{}
	for _, f := range s.Files {
		data, err := read(f)
		if err != nil {
			errs = append(errs, &yamlerr.Error{File: f, Msg: err.Error()})
			complete = false
			continue
		}
		u, err := readFile(f, data)
		if err != nil {
			errs = append(errs, asList(f, err)...)
			complete = false
			continue
		}
		ps := u.presets
		if slices.Contains(shipped, f) {
			under[u] = true
			ps = nil
			for _, p := range u.presets {
				if prev, taken := reg[p.Name]; taken && !slices.Contains(shipped, prev.File) {
					s.Replaced = append(s.Replaced, "preset "+p.Name)
					continue
				}
				ps = append(ps, p) // a name twice in the shipped set is reg.add's error
			}
		}
		errs = append(errs, reg.add(ps)...)
		units = append(units, u)
	}
	byName := map[string]*Playbook{}
	for _, u := range units {
		p, err := u.finish(reg, complete)
		if err != nil {
			errs = append(errs, asList(u.file, err)...)
			continue
		}
		for _, pb := range p.playbooks {
			if prev, dup := byName[pb.Name]; dup {
				if under[u] && !slices.Contains(shipped, prev.File) {
					s.Replaced = append(s.Replaced, pb.Name)
					continue
				}
				errs = append(errs, &yamlerr.Error{File: u.file, Line: pb.Line, Col: pb.Col,
					Msg: fmt.Sprintf("duplicate playbook name %q (first at %s:%d)", pb.Name, prev.File, prev.Line)})
				continue
			}
			byName[pb.Name] = pb
			s.Playbooks = append(s.Playbooks, pb)
		}
		if !under[u] || len(files) == 0 {
			s.Tests = append(s.Tests, p.tests...)
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if err := verify(s.Playbooks); err != nil {
		return nil, err
	}
	return s, nil
}

func asList(file string, err error) yamlerr.List {
	switch e := err.(type) {
	case yamlerr.List:
		return e
	case *yamlerr.Error:
		return yamlerr.List{e}
	}
	return yamlerr.List{{File: file, Msg: err.Error()}}
}

// Match returns the playbooks an alert with these labels runs, like Alertmanager
// routes: the first match, and after a match with continue: true the next ones too.
func Match(pbs []*Playbook, ls template.KV) []*Playbook {
	set := model.LabelSet{}
	for k, v := range ls {
		set[model.LabelName(k)] = model.LabelValue(v)
	}
	var out []*Playbook
	for _, pb := range pbs {
		if !pb.Match.Matches(set) {
			continue
		}
		out = append(out, pb)
		if !pb.Continue {
			break
		}
	}
	return out
}

// Plan returns the plans of the playbooks the alert matches (none: empty slice).
func (s *Set) Plan(alert template.Alert, w vocab.Window) ([]*Plan, error) {
	out := []*Plan{}
	for _, pb := range Match(s.Playbooks, alert.Labels) {
		out = append(out, pb.Plan(alert, w))
	}
	return out, nil
}

// Rebuild re-parses a stored playbook's source and plans it again (a resumed run),
// whatever the current set holds.
func (s *Set) Rebuild(sp StoredPlan, alert template.Alert, w vocab.Window) (*Plan, error) {
	return Rebuild(sp, alert, w)
}

// Rebuild re-parses a stored playbook's source and plans it for the alert.
func Rebuild(sp StoredPlan, alert template.Alert, w vocab.Window) (*Plan, error) {
	p, err := parseSelf(sp.File, sp.Source, false)
	if err != nil {
		return nil, fmt.Errorf("rebuild playbook %s: %w", sp.Playbook, err)
	}
	for _, pb := range p.playbooks {
		if pb.Name == sp.Playbook {
			if sp.Digest != "" && pb.Digest != sp.Digest {
				return nil, fmt.Errorf("rebuild playbook %s: source digest %s, stored %s", sp.Playbook, pb.Digest, sp.Digest)
			}
			return pb.Plan(alert, w), nil
		}
	}
	return nil, fmt.Errorf("rebuild playbook %s: not in its stored source", sp.Playbook)
}
