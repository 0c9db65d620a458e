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
)

// The step families that are packages of their own declare their Kind;
// they are registered here, beside the kinds of this package, which
// register from their own files.
func init() {
	Register(chart.Kind)
	Register(gpu.Kind)
	Register(httpstep.Kind)
	Register(traces.Kind)
	Register(peers.Kind)
	Register(profile.Kind)
	Register(prometheus.Kind)
	Register(scrape.Kind)
}
