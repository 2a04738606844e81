// Command aipo trains language models to reason with AIPO: rollouts with
// collaborator agents on Apache Beam, a Go learner, evaluation and analytics.
//
// Usage:
//
//	aipo <command> [flags]
//
// Run "aipo help" for the list of commands and "aipo <command> --help" for
// the flags of one. Beam's own flags (--runner, --endpoint,
// --environment_type, Dataflow's) are accepted by every pipeline command.
//
// The same binary is the worker of its pipelines: started by Beam's SDK
// harness boot program with flags only (--worker=true --id=...
// --control_endpoint=...), it serves the runner instead of running a
// command. Build it for Linux with `make worker` and give it to the runner
// with --worker_binary.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	// The "cuda" compute backend (learner.backend, aipo serve --device):
	// learner/cuda registers itself in learner/backend. "cpu" is always
	// there.
	_ "github.com/aipo-rl/aipo/learner/cuda"
)

// command is one subcommand. run receives the arguments after the command
// name (a nested command such as "collaborators serve" receives those after
// "serve") and returns nil or the error dispatch reports (exit.go).
type command struct {
	name    string // "analyze", or "collaborators serve"
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; each command's file calls it from init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("aipo: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func usage() {
	fmt.Fprintf(os.Stderr, "aipo: AIPO reinforcement learning for reasoning\n\nUsage: aipo <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-22s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'aipo <command> --help' for the flags of a command.\n")
}

func main() {
	os.Exit(dispatch(os.Args[1:]))
}

func dispatch(args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if workerInvocation(args) {
		return runWorker(args)
	}
	// Two-word commands first ("collaborators serve").
	if len(args) >= 2 {
		if c, ok := commands[args[0]+" "+args[1]]; ok {
			return report(c.name, c.run(args[2:]))
		}
	}
	if c, ok := commands[args[0]]; ok {
		return report(c.name, c.run(args[1:]))
	}
	var near []string
	for n := range commands {
		if strings.HasPrefix(n, args[0]) {
			near = append(near, n)
		}
	}
	fmt.Fprintf(os.Stderr, "aipo: unknown command %q", args[0])
	if len(near) > 0 {
		sort.Strings(near)
		fmt.Fprintf(os.Stderr, " (did you mean %s?)", strings.Join(near, ", "))
	}
	fmt.Fprintf(os.Stderr, "; run 'aipo help' for the list\n")
	return 2
}
