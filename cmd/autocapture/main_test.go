package main

import (
	"testing"

	"github.com/autocapture/autocapture/internal/testkit/testenv"
)

// The tests here are unit tests of the binary's own code (flags, config,
// dispatch, the demo's tables); the tests that run it as a process against
// real components live in e2e/daemon.

func TestMain(m *testing.M) { testenv.Main(m) }
