package capture

import (
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/steptest"
	"github.com/autocapture/autocapture/internal/testkit/testenv"
	"github.com/autocapture/autocapture/vocab"
)

// TestMain runs the package's tests through testenv, which stops the real
// components (Prometheus) the integration tests and benchmarks start.
func TestMain(m *testing.M) { testenv.Main(m) }

// promInput is an Input against url with a local store and a one-hour window.
func promInput(t testing.TB, url string) *vocab.Input { return steptest.PromInput(t, url) }
