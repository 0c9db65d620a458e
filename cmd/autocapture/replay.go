package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/alertmanager/template"

	"github.com/autocapture/autocapture/handlers"
	"github.com/autocapture/autocapture/playbooks"
	"github.com/autocapture/autocapture/vocab"
)

func init() {
	register("replay", command{summary: "show what a saved Alertmanager payload would run (--dry-run)", run: runReplay})
}

// replayAlert is what --dry-run prints for one alert.
type replayAlert struct {
	Alert       map[string]string `yaml:"alert"`
	Status      string            `yaml:"status"`
	Fingerprint string            `yaml:"fingerprint"`
	Window      string            `yaml:"window,omitempty"`
	Note        string            `yaml:"note,omitempty"`
	Plans       []replayPlan      `yaml:"plans"`
}

type replayPlan struct {
	Playbook      string       `yaml:"playbook"`
	At            string       `yaml:"at"`
	Digest        string       `yaml:"digest"`
	Timeout       string       `yaml:"timeout,omitempty"`
	CooldownKey   string       `yaml:"cooldown_key,omitempty"`
	MaxConcurrent int          `yaml:"max_concurrent,omitempty"`
	Steps         []replayStep `yaml:"steps"`
}

type replayStep struct {
	ID              string `yaml:"id"`
	Kind            string `yaml:"kind"`
	Tier            string `yaml:"tier"`
	Timeout         string `yaml:"timeout,omitempty"`
	When            string `yaml:"when,omitempty"`
	ContinueOnError bool   `yaml:"continue_on_error,omitempty"`
	Config          any    `yaml:"config,omitempty"`
	Error           string `yaml:"error,omitempty"`
}

// runReplay prints, for each alert of a saved payload, the matched playbooks and
// their rendered plans. It sends nothing.
func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("replay", "--dry-run [--config.file F] [--now T] payload.json", stdout, stderr)
	cfgFile := fs.String("config.file", "", "daemon config (playbooks: globs, runs.lookback)")
	dry := fs.Bool("dry-run", false, "print the plans and send nothing (required for now)")
	nowFlag := fs.String("now", "", "RFC 3339 time the window ends at (default: now)")
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if !*dry {
		fmt.Fprintln(stderr, "replay: only --dry-run is supported: running a payload for real is the daemon's job (POST it to serve's webhook)")
		return 2
	}
	now := time.Now()
	if *nowFlag != "" {
		t, err := time.Parse(time.RFC3339, *nowFlag)
		if err != nil {
			fmt.Fprintf(stderr, "replay: --now: %v\n", err)
			return 2
		}
		now = t
	}
	cfg, err := loadConfig(*cfgFile)
	if printErrors(stderr, err) {
		return 1
	}
	set, err := loadPlaybooks(cfg, nil)
	if printErrors(stderr, err) {
		return 1
	}
	p, err := readPayload(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 1
	}
	for _, r := range p.Rejected {
		fmt.Fprintf(stderr, "replay: alert %d (%s) would be rejected: %s: %s\n", r.Index, r.Alertname, r.Reason, r.Detail)
	}
	out := make([]replayAlert, 0, len(p.Message.Alerts))
	for _, a := range p.Message.Alerts {
		if a.Status == "resolved" {
			out = append(out, replayAlert{Alert: a.Labels, Status: a.Status, Fingerprint: a.Fingerprint,
				Note: "resolved: sets resolved_at on its run (tier 3 is cancelled); starts no capture", Plans: []replayPlan{}})
			continue
		}
		w := vocab.AlertWindow(a.StartsAt, cfg.Runs.Lookback, now)
		plans, err := set.Plan(a, w)
		if err != nil {
			fmt.Fprintf(stderr, "replay: %v\n", err)
			return 1
		}
		out = append(out, describe(a, w, plans))
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(b)
	return 0
}

// readPayload reads a saved webhook body through the webhook's own decoder, so
// replay sees exactly the alerts serve would accept (fingerprints filled in the
// way Alertmanager computes them).
func readPayload(path string) (*handlers.Payload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := handlers.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: the webhook would answer 400: %w", path, err)
	}
	return p, nil
}

// describe turns one alert's plans into what --dry-run prints.
func describe(a template.Alert, w vocab.Window, plans []*playbooks.Plan) replayAlert {
	ra := replayAlert{Alert: a.Labels, Status: a.Status, Fingerprint: a.Fingerprint,
		Window: fmt.Sprintf("%s .. %s (%s)", w.Start.UTC().Format(time.RFC3339), w.End.UTC().Format(time.RFC3339),
			playbooks.PromDuration(w.End.Sub(w.Start).Round(time.Second))),
		Plans: []replayPlan{}}
	for _, p := range plans {
		rp := replayPlan{Playbook: p.Playbook, At: fmt.Sprintf("%s:%d", p.File, p.Line), Digest: p.Digest[:12],
			CooldownKey: p.CooldownKey, MaxConcurrent: p.MaxConcurrent}
		if p.Timeout > 0 {
			rp.Timeout = p.Timeout.String()
		}
		for _, st := range p.Steps {
			rs := replayStep{ID: st.ID, Kind: st.Kind, Tier: st.Tier.String(), ContinueOnError: st.ContinueOnError, Config: st.Config}
			if st.Timeout > 0 {
				rs.Timeout = st.Timeout.String()
			}
			if st.When != nil {
				rs.When = st.When.Source
			}
			if st.RenderErr != nil {
				rs.Error = st.RenderErr.Error()
			}
			rp.Steps = append(rp.Steps, rs)
		}
		ra.Plans = append(ra.Plans, rp)
	}
	return ra
}
