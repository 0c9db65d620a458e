package capture

import (
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// TestMain runs the package's tests through testenv, which stops the real
// components (Prometheus) the integration tests and benchmarks start.
func TestMain(m *testing.M) { testenv.Main(m) }
