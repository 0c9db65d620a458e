package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"

	"go.uber.org/zap"

	"github.com/autocapture/autocapture/playbooks/playtest"
	"github.com/autocapture/autocapture/storage"
)

func init() {
	register("test", command{summary: "run the tests: blocks of playbook files, with no network", run: runTest})
}

// runTest runs every test case of the playbooks given (or the config's, or the
// shipped ones) and reports each with its file and line. Exit 1 if any fails.
func runTest(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("test", "[--config.file F] [--run RE] [-v] [playbook files or dirs…]", stdout, stderr)
	cfgFile := fs.String("config.file", "", "daemon config whose playbooks: globs to test (default: the shipped set)")
	run := fs.String("run", "", "only cases whose name matches this regular expression")
	verbose := fs.Bool("v", false, "print each step's status")
	if code, done := fs.parse(args); done {
		return code
	}
	re, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintf(stderr, "test: --run: %v\n", err)
		return 2
	}
	cfg, err := loadConfig(*cfgFile)
	if printErrors(stderr, err) {
		return 1
	}
	set, err := loadPlaybooks(cfg, fs.Args())
	if printErrors(stderr, err) {
		return 1
	}
	dir, err := os.MkdirTemp("", "autocapture-test-")
	if err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	store, err := storage.NewLocal(dir)
	if err != nil {
		fmt.Fprintf(stderr, "test: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	passed, failed := 0, 0
	for _, tc := range set.Tests {
		if !re.MatchString(tc.Name) {
			continue
		}
		o := playtest.Run(ctx, tc, store, zap.NewNop())
		if o.Passed() {
			passed++
			fmt.Fprintf(stdout, "ok    %s: %s\n", o.Where(), tc.Name)
		} else {
			failed++
			fmt.Fprintf(stdout, "FAIL  %s: %s\n", o.Where(), tc.Name)
			for _, f := range o.Failures {
				fmt.Fprintf(stdout, "        %s\n", f)
			}
		}
		if *verbose {
			for _, r := range o.Steps {
				line := string(r.Status)
				for _, s := range []string{r.Reason, r.Error, r.Summary} {
					if s != "" {
						line += ": " + s
					}
				}
				fmt.Fprintf(stdout, "        %s/%s: %s\n", r.Plan, r.ID, line)
			}
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}
