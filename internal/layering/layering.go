// Package layering states how the module's packages depend on each other, and
// its test holds every package to it: imports point down. A package imports
// only packages of a lower layer; the test harnesses sit on top, so no
// production package can import one, and only the binaries wire everything.
//
// In one line, bottom to top: vocab and the leaves ← storage, database ← config and the
// steps' shared kit ← the Prometheus query runner ← the step families ← triage ←
// capture (the registry), notify ← playbooks ← the executor and the run
// vocabulary ← the profiling control plane, the thread outbox, the artifacts ←
// grouping and cooldowns (they record into threads) ← the run lifecycle ←
// the run pages ← runner and handlers ← the binaries ← the test harnesses.
package layering

// Layer is a set of packages (paths relative to the module) at one height.
type Layer struct {
	Name     string
	Packages []string
}

// Layers, bottom first. A package of layer i may import any package of a
// layer below i, none of its own layer or above.
var Layers = []Layer{
	{"leaves: the shared words and self-contained libraries", []string{
		"vocab", "links", "agent", "torchtrace", "torchtrace/internal/gen", "vllmsim",
		"playbooks/vllm", "playbooks/sglang", "internal/bytesize", "internal/clip", "internal/dirwatch",
		"internal/yamlerr", "internal/untrusted", "config/internal/refgen", "internal/metricref",
	}},
	{"where artifacts and rows go", []string{"storage", "database"}},
	{"the daemon's configuration, and the steps' shared kit", []string{
		"config", "capture/internal/stepkit", "capture/internal/exposition", "capture/internal/sglangexpo", "capture/internal/views",
	}},
	{"what the Prometheus step families share: the query runner", []string{"capture/internal/promkit"}},
	{"step families, the allow-list, the notifier contract, TLS", []string{
		"capture/chart", "capture/gpu", "capture/httpstep", "capture/peers", "capture/profile", "capture/prometheus", "capture/scrape", "capture/traces",
		"targets", "notify", "internal/webtls", "silences",
	}},
	{"the step family that reads the others' views", []string{"capture/triage"}},
	{"the step registry and Slack: the notifier and its interactivity endpoint", []string{"capture", "notify/slack"}},
	{"the playbook language", []string{"playbooks"}},
	{"the plan executor", []string{"runner/executor"}},
	{"the run service's vocabulary, a playbook's own tests", []string{"runner/runs", "playbooks/playtest"}},
	{"the run service's parts: the profiling control plane, the thread outbox and its delivery, the artifacts", []string{"runner/profiling", "runner/outbox", "runner/artifacts"}},
	{"the run service's parts that record into threads: grouping, routing, cooldowns and slots", []string{"runner/grouping", "runner/actions"}},
	{"the run lifecycle: accept, lease, execute, reap, over the parts", []string{"runner/lifecycle"}},
	{"the run pages: HTML over the run vocabulary, and the thread's actions for their form", []string{"runpage"}},
	{"the services: durable runs, HTTP routes", []string{"runner", "handlers"}},
	{"the binaries and benchmarks", []string{
		"cmd/autocapture", "cmd/vllmsim", "bench/ceiling", "bench/s3put",
		"torchtrace/internal/cmd/tracebench",
	}},
	{"test harnesses, imported by tests only: real components, stand-ins", []string{
		"internal/testkit/testenv", "internal/testkit/slackstub", "internal/testkit/fixtures",
		"internal/testkit/webtlstest", "internal/testkit/hostile", "internal/testkit/golden", "internal/testkit/htmldoc",
		"internal/testkit/crashstore",
	}},
	{"test harnesses built on those", []string{
		"internal/testkit/slackstub/slackspec", "internal/testkit/fakestep",
		"internal/testkit/manifestcheck", "internal/testkit/steptest", "internal/testkit/runwait",
	}},
	// e2e/deploy is not here: it is a module of its own (its go.mod keeps the
	// manifest checkers' dependencies out of this one), which `go list` of
	// this module does not reach, and its package is all tests.
	{"test-only packages", []string{"e2e", "e2e/daemon", "deploy", "internal/layering", "internal/sourcerules"}},
}

// layerOf returns the index of the layer holding pkg.
func layerOf(pkg string) (int, bool) {
	for i, l := range Layers {
		for _, p := range l.Packages {
			if p == pkg {
				return i, true
			}
		}
	}
	return 0, false
}
