package traces_test

import (
	"testing"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestMain runs the package's tests through testenv, which stops the real
// components (Jaeger, Prometheus) the integration tests start.
func TestMain(m *testing.M) { testenv.Main(m) }

// buildStep builds a registered kind from a config filled by fill.
func buildStep[C any](t *testing.T, kind string, fill func(*C)) vocab.Step {
	t.Helper()
	k, ok := capture.Lookup(kind)
	if !ok {
		t.Fatalf("kind %q not registered", kind)
	}
	return steptest.Build(t, k, fill)
}
