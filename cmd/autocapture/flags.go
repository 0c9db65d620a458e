package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// flags is one subcommand's flag set, made the same way for every
// subcommand: Prometheus-style dotted names (--web.listen-address,
// --log.level), --help that prints the usage and exits 0,
// --version that prints the build and exits 0, and old flag names kept as
// aliases for one release with a warning on stderr.
type flags struct {
	*flag.FlagSet
	name    string
	stdout  io.Writer
	stderr  io.Writer
	version bool
	renamed []string // the aliases this command line used, as "--old: use --new"
}

// newFlags makes subcommand name's flag set. usage is the command line's
// shape ("[--config.file F] [files…]"); the flags follow it.
func newFlags(name, usage string, stdout, stderr io.Writer) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), name: name, stdout: stdout, stderr: stderr}
	f.SetOutput(stderr)
	f.BoolVar(&f.version, "version", false, "print the version and exit")
	f.Usage = func() {
		fmt.Fprintf(f.Output(), "usage: autocapture %s %s\n\nflags:\n", name, usage)
		f.PrintDefaults()
	}
	return f
}

// alias keeps old as another name of flag name for one release: it sets the
// same value and is reported by parse as renamed.
func (f *flags) alias(old, name string) {
	target := f.Lookup(name)
	if target == nil {
		panic("autocapture: alias of an unknown flag: " + name)
	}
	f.Func(old, "deprecated: the old name of --"+name, func(v string) error {
		f.renamed = append(f.renamed, fmt.Sprintf("--%s is deprecated: use --%s (the old name goes in the next release)", old, name))
		return target.Value.Set(v)
	})
}

// parse parses args. done says the command is over, with exit code code:
// 0 after --help or --version, 2 after a bad flag (the reason and the usage
// are on stderr). Warnings for renamed flags go to stderr.
func (f *flags) parse(args []string) (code int, done bool) {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0, true // the flag package printed the usage (on stderr, as Go's tools do)
	}
	if err != nil {
		return 2, true
	}
	if f.version {
		fmt.Fprintln(f.stdout, versionText())
		return 0, true
	}
	for _, r := range f.renamed {
		fmt.Fprintf(f.stderr, "%s: %s\n", f.name, r)
	}
	return 0, false
}
