package playbooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/autocapture/autocapture/capture"
	"github.com/autocapture/autocapture/vocab"
)

// Test kinds, registered under names no real kind uses. They echo their config.

type tQuery struct {
	Name   string `yaml:"name"`
	Signal string `yaml:"signal"`
	Query  string `yaml:"query"`
}

type tPromConfig struct {
	Queries []tQuery `yaml:"queries" json:"queries"`
}

type tTracesConfig struct {
	Limit   int    `yaml:"limit" json:"limit"`
	Service string `yaml:"service" json:"service,omitempty"`
}

type tTriageConfig struct{}

// echoStep returns its rendered config as the summary.
type echoStep struct{ cfg any }

func (e echoStep) Run(context.Context, *vocab.Input) (*vocab.Result, error) {
	return &vocab.Result{Summary: fmt.Sprint(e.cfg)}, nil
}

func init() {
	capture.Register(vocab.Kind{Name: "tprom", Tier: vocab.TierMetrics, Doc: "Test PromQL kind.",
		Config: func() any { return &tPromConfig{} },
		Build: func(c any) (vocab.Step, error) {
			cfg := c.(*tPromConfig)
			if len(cfg.Queries) == 0 {
				return nil, errors.New("queries: at least one query is required")
			}
			for _, q := range cfg.Queries {
				if strings.Contains(q.Query, "{{") {
					return nil, errors.New("unrendered template")
				}
			}
			return echoStep{cfg}, nil
		}})
	capture.Register(vocab.Kind{Name: "ttriage", Tier: vocab.TierTriage, Doc: "Test triage kind.",
		Config: func() any { return &tTriageConfig{} },
		Build:  func(c any) (vocab.Step, error) { return echoStep{c}, nil }})
	capture.Register(vocab.Kind{Name: "ttraces", Tier: vocab.TierTraces, Doc: "Test traces kind.", Cooldown: true,
		Config: func() any { return &tTracesConfig{Limit: 10} },
		Build: func(c any) (vocab.Step, error) {
			if c.(*tTracesConfig).Limit < 0 {
				return nil, errors.New("limit must not be negative")
			}
			return echoStep{c}, nil
		}})
}
