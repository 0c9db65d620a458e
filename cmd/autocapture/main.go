// Command autocapture captures evidence from vLLM servers when an Alertmanager alert
// fires: `serve` runs the daemon; `demo` runs one alert through it against an
// in-process vLLM simulator; `check`, `test` and `replay` work on playbooks;
// `agent` is the profile sidecar that serves a pod's profiler folder to the daemon.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand; each lives in its own file and registers itself.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("autocapture: command registered twice: " + name)
	}
	commands[name] = c
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-v", "-version", "--version":
		fmt.Fprintln(stdout, versionText())
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "autocapture: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: autocapture <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nautocapture <command> --help shows a command's flags; autocapture --version the build.")
}
