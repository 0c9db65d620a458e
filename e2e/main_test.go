// Package e2e proves the product end to end with real components: vllmsim under
// its own load, a real Prometheus evaluating the shipped alert rules, a real
// Alertmanager delivering to the autocapture binary, spans in a real Jaeger.
package e2e

import (
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
