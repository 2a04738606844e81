package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/aipo-rl/aipo/internal/textdist"
)

// parseFlags parses a command's flags; an error ends the command, as
// dispatch reports it: --help exits 0 (after the usage);
// a bad flag exits 2 with the flag package's message, and an unknown one
// also with the flag meant when one is close. The process's own flag set
// (whose flags Beam reads) is switched to return its errors here rather
// than exit.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if fs == flag.CommandLine {
		fs.Init(os.Args[0], flag.ContinueOnError)
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &cmdError{code: 0}
	}
	const undefined = "flag provided but not defined: -"
	if name, found := strings.CutPrefix(err.Error(), undefined); found {
		if g := closestFlag(fs, name); g != "" {
			fmt.Fprintf(fs.Output(), "aipo: unknown flag -%s; did you mean --%s?\n", name, g)
		}
	}
	return exitCode(2)
}

// closestFlag is the defined flag nearest to name, if it is near enough to
// be a typo.
func closestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return textdist.Closest(name, names)
}

// libraryFlags are the flags the process's flag set held before any aipo
// command added its own: Beam's runner and pipeline options, and any other
// library's.
var libraryFlags = func() map[string]bool {
	m := map[string]bool{}
	flag.CommandLine.VisitAll(func(f *flag.Flag) { m[f.Name] = true })
	return m
}()

// printFlags writes fs's flags for a command's --help: the command's own
// first, then (on the process's flag set) Beam's and the libraries' under
// their own heading.
func printFlags(fs *flag.FlagSet) {
	if fs != flag.CommandLine {
		fs.PrintDefaults()
		return
	}
	own := flag.NewFlagSet("", flag.ContinueOnError)
	lib := flag.NewFlagSet("", flag.ContinueOnError)
	own.SetOutput(fs.Output())
	lib.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		to := own
		if libraryFlags[f.Name] {
			to = lib
		}
		to.Var(f.Value, f.Name, f.Usage)
		to.Lookup(f.Name).DefValue = f.DefValue
	})
	own.PrintDefaults()
	n := 0
	lib.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(fs.Output(), "\nBeam's flags (%d: the runner and its options, e.g. --runner, --endpoint, --environment_type, Dataflow's --project, --region):\n", n)
		lib.PrintDefaults()
	}
}
