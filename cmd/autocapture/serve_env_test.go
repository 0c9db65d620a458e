package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
)

// TestServeEnvMarksTheDefaultPrometheus: the Prometheus steps learn whether
// prometheus.url is the built-in default (nothing there means none was set
// up: not configured) or one the operator set (nothing there is a failure).
func TestServeEnvMarksTheDefaultPrometheus(t *testing.T) {
	for _, tt := range []struct {
		url         string
		wantDefault bool
	}{
		{config.Default().Prometheus.URL, true},
		{"http://prometheus.monitoring:9090", false},
	} {
		cfg := config.Default()
		cfg.Storage.Path = t.TempDir()
		cfg.Prometheus.URL = tt.url
		env, _, err := newEnv(context.Background(), &cfg, zap.NewNop(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if env.Prometheus == nil || env.Prometheus.Default != tt.wantDefault {
			t.Errorf("prometheus.url %s: endpoint %+v, want Default %v", tt.url, env.Prometheus, tt.wantDefault)
		}
	}
}
