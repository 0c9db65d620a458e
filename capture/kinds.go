package capture

import (
	"github.com/autocapture/autocapture/capture/chart"
	"github.com/autocapture/autocapture/capture/gpu"
	"github.com/autocapture/autocapture/capture/httpstep"
	"github.com/autocapture/autocapture/capture/peers"
	"github.com/autocapture/autocapture/capture/profile"
	"github.com/autocapture/autocapture/capture/prometheus"
	"github.com/autocapture/autocapture/capture/scrape"
	"github.com/autocapture/autocapture/capture/traces"
	"github.com/autocapture/autocapture/capture/triage"
)

// Every step kind is a family's package that declares its Kind; the one
// registry takes them all here.
func init() {
	Register(chart.Kind)
	Register(gpu.Kind)
	Register(httpstep.Kind)
	Register(peers.Kind)
	Register(profile.Kind)
	Register(prometheus.Kind)
	Register(scrape.Kind)
	Register(traces.Kind)
	Register(triage.Kind)
}
