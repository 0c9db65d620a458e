package playbooks

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/common/model"

	"github.com/autocapture/autocapture/vocab"
)

// TestCase is one case of a file's tests: block, ready to be run by playtest.
type TestCase struct {
	Name string
	File string
	Line int
	// Alert is the sample alert, with its fingerprint computed from its labels.
	Alert  template.Alert
	Mocks  map[string]MockSpec
	Expect ExpectSpec
	// Playbooks are the playbooks of the case's own file, in order: the case's
	// alert is matched against them.
	Playbooks []*Playbook
}

// testCase parses one item of tests: and checks that every step id it names
// exists in the file's playbooks.
func (p *fileParser) testCase(n ast.Node, pbs []*Playbook) *TestCase {
	var spec TestSpec
	if ok, _ := p.decode(n, &spec, "test"); !ok {
		return nil
	}
	tc := &TestCase{Name: spec.Name, File: p.file, Line: keyOf(n).GetToken().Position.Line,
		Mocks: spec.Mocks, Expect: spec.Expect, Playbooks: pbs}
	if spec.Name == "" {
		p.errorf(n, "test: name is required")
	}
	tc.Alert = spec.Alert.alert()
	ids := map[string]bool{}
	for _, pb := range pbs {
		for _, st := range pb.Steps {
			ids[st.ID], ids[pb.Name+"/"+st.ID] = true, true
		}
	}
	mocks := child(n, "mocks")
	for id, m := range spec.Mocks {
		if !ids[id] {
			p.errorf(orNode(keyNode(mocks, id), n), "test %q: mock for unknown step %q", spec.Name, id)
		}
		if m.Error != nil && !validReason(m.Error.Reason) {
			p.errorf(orNode(keyNode(mocks, id), n), "test %q: mock %s: unknown error reason %q", spec.Name, id, m.Error.Reason)
		}
		if m.Verdict != nil && !slices.Contains(vocab.Verdicts, m.Verdict.ID) {
			p.errorf(orNode(keyNode(mocks, id), n), "test %q: mock %s: unknown verdict %q (want %s)", spec.Name, id, m.Verdict.ID, strings.Join(vocab.Verdicts, ", "))
		}
	}
	p.checkExpect(n, &spec, ids)
	return tc
}

// checkExpect reports expectations naming steps or verdicts that do not exist.
func (p *fileParser) checkExpect(n ast.Node, spec *TestSpec, ids map[string]bool) {
	en := child(n, "expect")
	for _, list := range []struct {
		key string
		ids []string
	}{{"ran", spec.Expect.Ran}, {"skipped", spec.Expect.Skipped}, {"failed", spec.Expect.Failed}, {"not_configured", spec.Expect.NotConfigured}} {
		for i, id := range list.ids {
			if !ids[id] {
				p.errorf(orNode(item(child(en, list.key), i), n), "test %q: expect.%s: unknown step %q", spec.Name, list.key, id)
			}
		}
	}
	for id := range spec.Expect.SummaryContains {
		if !ids[id] {
			p.errorf(orNode(keyNode(child(en, "summary_contains"), id), n), "test %q: expect.summary_contains: unknown step %q", spec.Name, id)
		}
	}
	if v := spec.Expect.Verdict; v != "" && !slices.Contains(vocab.Verdicts, v) {
		p.errorf(orNode(child(en, "verdict"), n), "test %q: unknown verdict %q (want %s)", spec.Name, v, strings.Join(vocab.Verdicts, ", "))
	}
}

// alert turns the sample into an Alertmanager alert.
func (a AlertSpec) alert() template.Alert {
	ls := model.LabelSet{}
	for k, v := range a.Labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	status := a.Status
	if status == "" {
		status = "firing"
	}
	starts := a.StartsAt
	if starts.IsZero() {
		starts = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return template.Alert{Status: status, Labels: template.KV(a.Labels), Annotations: template.KV(a.Annotations),
		StartsAt: starts, EndsAt: a.EndsAt, GeneratorURL: a.GeneratorURL, Fingerprint: ls.Fingerprint().String()}
}

// Result turns a mock into the step's result, or its classified error.
func (m MockSpec) Result() (*vocab.Result, error) {
	if m.Error != nil {
		msg := m.Error.Message
		if msg == "" {
			msg = "mocked " + m.Error.Reason
		}
		return nil, &vocab.Error{Reason: vocab.Reason(m.Error.Reason), Err: errors.New(msg)}
	}
	r := &vocab.Result{Summary: m.Summary, Findings: m.Findings, Signals: vocab.Signals(m.Signals)}
	if m.Verdict != nil {
		r.Verdict = &vocab.Verdict{ID: m.Verdict.ID, Contributing: m.Verdict.Contributing}
	}
	return r, nil
}

func validReason(r string) bool { return slices.Contains(vocab.Reasons, vocab.Reason(r)) }

// keyNode returns the key node of key in a mapping, or nil.
func keyNode(n ast.Node, key string) ast.Node {
	m, ok := n.(ast.MapNode)
	if !ok || n == nil {
		return nil
	}
	for it := m.MapRange(); it.Next(); {
		if it.Key().GetToken().Value == key {
			return it.Key()
		}
	}
	return nil
}
