package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/config"
	"github.com/autocapture/autocapture/internal/yamlerr"
	"github.com/autocapture/autocapture/playbooks"
)

func init() {
	register("check", command{summary: "validate the config and playbooks (file:line:col errors)", run: runCheck})
}

// runCheck validates a config file and the playbooks it names (or the paths given,
// or the shipped set). Exit 0 with a one-line summary, 1 on any error, 2 on usage.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "[--config.file F] [playbook files or dirs…]", stdout, stderr)
	cfgFile := fs.String("config.file", "", "daemon config file to check (its playbooks: globs too)")
	if code, done := fs.parse(args); done {
		return code
	}
	cfg, cfgErr := loadConfig(*cfgFile)
	if cfg != nil && *cfgFile != "" {
		for _, w := range cfg.Warnings() { // said, not refused: the config loads
			fmt.Fprintf(stderr, "%s: warning: %s\n", *cfgFile, w)
		}
	}
	failed := printErrors(stderr, cfgErr)
	pbCfg := cfg
	if cfgErr != nil && *cfgFile != "" {
		pbCfg = partialConfig(*cfgFile)
	}
	set, err := loadPlaybooks(pbCfg, fs.Args())
	failed = printErrors(stderr, err) || failed
	if failed {
		return 1
	}
	steps := 0
	for _, pb := range set.Playbooks {
		steps += len(pb.Steps)
	}
	// What was loaded from where: the shipped set, files, or files over it.
	what := fmt.Sprintf("%d playbooks", len(set.Playbooks))
	switch shipped, files := set.Origins(); {
	case files == 0:
		what = fmt.Sprintf("%d shipped playbooks", len(set.Playbooks))
	case shipped > 0 || len(set.Replaced) > 0:
		what = set.Summary()
	}
	cfgNote := ""
	if *cfgFile != "" {
		cfgNote = ", config " + *cfgFile + " ok"
	}
	fmt.Fprintf(stdout, "ok: %s (%d steps, %d tests) in %d files%s\n",
		what, steps, len(set.Tests), len(set.Files), cfgNote)
	return 0
}

// loadConfig loads the daemon config; an empty path gives the defaults.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// partialConfig is what a config that does not load says well, so that
// check still reports the playbooks it names; nil (the shipped set) when the
// file is not YAML or its playbooks: or shipped_playbooks: was refused.
func partialConfig(path string) *config.Config {
	cfg, refused := config.Partial(path)
	for _, r := range refused {
		if r == "playbooks" || strings.HasPrefix(r, "playbooks[") || r == "shipped_playbooks" {
			return nil
		}
	}
	return cfg
}

// loadPlaybooks loads the paths given, else the config's globs, over the
// shipped set as serve would (unless the config turns it off), else the
// shipped set alone: a file that uses a shipped preset checks as it runs.
func loadPlaybooks(cfg *config.Config, paths []string) (*playbooks.Set, error) {
	src := playbooks.Shipped
	if cfg != nil {
		src = playbooks.Sources{Globs: cfg.Playbooks, Shipped: cfg.ShippedPlaybooks}
	}
	if len(paths) > 0 {
		src.Globs = paths
	}
	return playbooks.Load(src, zap.NewNop())
}

// printErrors prints one line per problem and reports whether there was any.
func printErrors(w io.Writer, err error) bool {
	if err == nil {
		return false
	}
	var list yamlerr.List
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(w, e.Error())
		}
		return true
	}
	fmt.Fprintln(w, strings.TrimSpace(err.Error()))
	return true
}
