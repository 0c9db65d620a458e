package playbooks

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/vocab"
)

// head is a valid playbook start; cases append steps to it (steps start on line 5).
const head = `playbooks:
  - name: p
    match: [alertname="A"]
    steps:
`

func TestParseErrorPositions(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown playbook field", "playbooks:\n  - name: p\n    matchh: [a=b]\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:5: unknown field "matchh"`},
		{"unknown top-level field", "playbook:\n  - name: p\n", `t.yaml:1:1: unknown field "playbook"`},
		{"bad matcher", "playbooks:\n  - name: p\n    match:\n      - alertname=\"A\"\n      - 'severity=~\"page'\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:5:9: bad matcher "severity=~\"page"`},
		{"unknown step kind", head + "      - id: a\n        promql: {}\n",
			`t.yaml:6:9: step "a": unknown step kind "promql" (known: `},
		{"no kind", head + "      - id: a\n        timeout: 1s\n", `t.yaml:5:9: step "a": no kind`},
		{"two kinds", head + "      - id: a\n        ttriage: {}\n        ttraces: {}\n",
			`t.yaml:7:9: step has two kind keys, "ttriage" and "ttraces"`},
		{"unknown field in kind config", head + "      - id: a\n        ttraces: {limit: 3, limt: 4}\n",
			`t.yaml:6:29: unknown field "limt"`},
		{"kind refuses its config", head + "      - id: a\n        ttraces: {limit: -1}\n",
			`t.yaml:6:19: step "a": ttraces: limit must not be negative`},
		{"bad template", head + "      - id: a\n        tprom: {queries: [{name: q, query: 'up{{ .Labels.x'}]}\n",
			`t.yaml:6:44: step "a": template:`},
		{"duplicate step id", head + "      - id: a\n        ttriage: {}\n      - id: a\n        ttraces: {}\n",
			`t.yaml:7:13: duplicate step id "a" (first at line 5)`},
		{"duplicate playbook", "playbooks:\n  - name: p\n    steps: [{id: a, ttriage: {}}]\n  - name: p\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:4:11: duplicate playbook name "p" (first at line 2)`},
		{"bad expression", head + "      - id: a\n        when: 'alert.status =='\n        ttraces: {}\n",
			`t.yaml:6:30: when: unexpected token EOF`},
		{"unknown name in expression", head + "      - id: a\n        when: foo == 1\n        ttraces: {}\n",
			`t.yaml:6:15: when: unknown name foo`},
		{"when on a step that runs later", head + "      - id: a\n        ttriage: {}\n        when: 'steps.b.verdict == \"x\"'\n      - id: b\n        ttraces: {}\n",
			`t.yaml:7:22: when: step "b" runs in tier 2, not before this step's tier triage`},
		{"when on a step of the same tier", head + "      - id: a\n        ttraces: {}\n      - id: b\n        ttraces: {}\n        when: steps.a.summary != \"\"\n",
			`t.yaml:9:21: when: step "a" runs in tier 2, not before this step's tier 2`},
		{"when on a missing step", head + "      - id: a\n        ttraces: {}\n        when: steps.nope.verdict == \"x\"\n",
			`t.yaml:7:21: when: no step "nope" in playbook`},
		{"when on an unknown alert field", head + "      - id: a\n        ttraces: {}\n        when: alert.lables.x == \"y\"\n",
			`t.yaml:7:21: when: alert has no field "lables"`},
		{"when not boolean", head + "      - id: a\n        ttraces: {}\n        when: 1 + 2\n",
			`t.yaml:7:15: when: expected bool`},
		{"bad tier", head + "      - id: a\n        tier: 4\n        ttraces: {}\n", `t.yaml:6:15: step "a": unknown tier "4"`},
		{"bad duration", head + "      - id: a\n        timeout: soon\n        ttraces: {}\n", `t.yaml:6:18: step.timeout: want a duration such as 20s, 500ms or 1m30s, got "soon"`},
		{"cooldown on a kind without", head + "      - id: a\n        cooldown: 1m\n        ttriage: {}\n",
			`t.yaml:6:19: step "a": kind ttriage takes no step cooldown`},
		{"cooldown_by without cooldown", "playbooks:\n  - name: p\n    cooldown_by: [instance]\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:18: cooldown_by needs a cooldown`},
		{"bad notify thread", "playbooks:\n  - name: p\n    notify: {channel: '#x', thread: sideways}\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:37: notify: thread: want per-alert or per-run, got "sideways"`},
		{"silence without matchers", "playbooks:\n  - name: p\n    silence: {matchers: []}\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:25: silence: matchers: name at least one label`},
		{"silence with nothing under it", "playbooks:\n  - name: p\n    silence:\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:5: silence: want matchers: [alertname, ...] under it`},
		{"silence with a bad label name", "playbooks:\n  - name: p\n    silence:\n      matchers: [alertname, model-name]\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:4:29: silence: matchers: bad label name "model-name"`},
		{"silence with a label twice", "playbooks:\n  - name: p\n    silence:\n      matchers:\n        - alertname\n        - instance\n        - alertname\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:7:11: silence: matchers: "alertname" is listed twice (first as item 1)`},
		{"silence without alertname", "playbooks:\n  - name: p\n    silence: {matchers: [instance, model_name]}\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:25: silence: matchers: must include alertname`},
		{"silence with an unknown field", "playbooks:\n  - name: p\n    silence: {matchers: [alertname], for: 1h}\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:38: unknown field "for"`},
		{"bad var template", "playbooks:\n  - name: p\n    vars: {x: '{{ .Labels.a '}\n    steps: [{id: a, ttriage: {}}]\n",
			`t.yaml:3:15: vars.x: template:`},
		{"no steps", "playbooks:\n  - name: p\n    match: [a=b]\n", `t.yaml:2:5: playbook "p": steps: at least one step is required`},
		{"test mocks an unknown step", "playbooks:\n  - name: p\n    steps: [{id: a, ttriage: {}}]\ntests:\n  - name: c\n    alert: {labels: {a: b}}\n    mocks: {zz: {summary: x}}\n    expect: {ran: [a]}\n",
			`t.yaml:7:13: test "c": mock for unknown step "zz"`},
		{"test expects an unknown step", "playbooks:\n  - name: p\n    steps: [{id: a, ttriage: {}}]\ntests:\n  - name: c\n    alert: {labels: {a: b}}\n    expect: {ran: [a], skipped: [q]}\n",
			`t.yaml:7:34: test "c": expect.skipped: unknown step "q"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFile("t.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestSilenceMatchersReachThePlan: silence.matchers, in the order written,
// are the plan's and what the run stores with it; a playbook without them
// leaves the choice to the daemon's default (nil).
func TestSilenceMatchersReachThePlan(t *testing.T) {
	src := "playbooks:\n  - name: p\n    silence: {matchers: [alertname, model_name]}\n    steps: [{id: a, ttriage: {}}]\n" +
		"  - name: q\n    steps: [{id: a, ttriage: {}}]\n"
	got, err := parseFile("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, q := got.playbooks[0], got.playbooks[1]
	plan := p.Plan(template.Alert{Labels: template.KV{"alertname": "A"}}, vocab.Window{})
	if want := []string{"alertname", "model_name"}; !slices.Equal(plan.Silence, want) || !slices.Equal(plan.Stored().Silence, want) {
		t.Errorf("plan silence %v, stored %v, want %v", plan.Silence, plan.Stored().Silence, want)
	}
	if s := q.Plan(template.Alert{}, vocab.Window{}).Stored().Silence; s != nil {
		t.Errorf("a playbook without silence: stores %v, want nil (the default)", s)
	}
}

func TestParseReportsEveryError(t *testing.T) {
	src := head + "      - id: a\n        nokind: {}\n      - id: b\n        ttraces: {}\n        when: steps.zz.x == 1\n"
	_, err := parseFile("t.yaml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 {
		t.Errorf("got %d errors, want 2:\n%v", len(lines), err)
	}
}

// TestParseSaysEveryMistakeInOurWords: a playbook's mistakes are worded as
// the config's are (the same decoder): each at its own line and column, all
// of them (a refused cooldown hides neither the playbook's unknown key nor
// its steps' mistakes), saying what is wanted or the key meant.
func TestParseSaysEveryMistakeInOurWords(t *testing.T) {
	src := "playbooks:\n  - name: p\n    match: [alertname=\"A\"]\n    cooldown: 2 s\n    cooldwn: 3s\n    steps:\n" +
		"      - id: a\n        ttraces: {limit: \"3 s\"}\n      - id: b\n        timeout: 2 s\n        ttraces: {limt: 4}\n"
	_, err := parseFile("t.yaml", []byte(src))
	want := strings.Join([]string{
		`t.yaml:4:15: playbook.cooldown: want a duration such as 20s, 500ms or 1m30s, got "2 s"`,
		`t.yaml:5:5: unknown field "cooldwn" in playbook: did you mean "cooldown"?`,
		`t.yaml:8:26: ttraces.limit: want an integer, e.g. 10, got "3 s"`,
		`t.yaml:10:18: step.timeout: want a duration such as 20s, 500ms or 1m30s, got "2 s"`,
		`t.yaml:11:19: unknown field "limt" in ttraces: did you mean "limit"?`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}

// TestParsePointsAtTheUnclosedBrace: a '{' left open is reported where it
// opens, not at the next item where the parser gave up.
func TestParsePointsAtTheUnclosedBrace(t *testing.T) {
	_, err := parseFile("t.yaml", []byte(head+"      - id: a\n        ttraces: {limit: 3\n      - id: b\n        ttriage: {}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), `t.yaml:6:18: this "{" is never closed: end it with "}"`) {
		t.Fatalf("got %v", err)
	}
}
