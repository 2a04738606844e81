// Command testgate runs `go test -json` (or reads its stream from stdin),
// prints what plain go test prints, lists the skipped tests, and exits
// non-zero when a package failed or never finished, or when a test skipped
// without the allow list allowing it. make test runs the main test run
// through it:
//
//	testgate -allow scripts/allowed-skips.txt -- go test -json ./...
//	go test -json ./... | testgate -allow scripts/allowed-skips.txt
//
// With a command, its exit status is kept when it is not 0 (go test's own
// failure); a run that go test passes but the gate does not exits 1. The
// allow list's format is in package testgate (AllowListFormat).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/aipo-rl/aipo/internal/testgate"
)

func main() {
	allowFile := flag.String("allow", "", "the allowed skips `file` (none: no skip is allowed)")
	module := flag.String("module", "", "the module `path` the list's packages are relative to (default: the module of ./go.mod)")
	whole := flag.Bool("whole", false, "the command is the whole suite (make test's): refuse go test flags that leave tests out (-run, -skip, -list, -short)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testgate [-allow FILE] [-module PATH] [-whole] [-- go test -json ARGS...]\n(without a command it reads the stream of go test -json from stdin)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(*allowFile, *module, *whole, flag.Args()))
}

// run returns the exit status.
func run(allowFile, module string, whole bool, cmdArgs []string) int {
	if whole {
		if f := testgate.Filters(cmdArgs); len(f) > 0 {
			fmt.Fprintf(os.Stderr, "testgate: this run is the whole suite, but go test is given %q, which leaves tests out without a skip the gate could see; remove it from TESTFLAGS (make test-TAG or go test -run runs a part)\n", f)
			return 2
		}
	}
	var allow *testgate.AllowList
	if allowFile != "" {
		var err error
		if allow, err = testgate.LoadAllowList(allowFile); err != nil {
			fmt.Fprintf(os.Stderr, "testgate: %v\n", err)
			return 2
		}
	}
	if module == "" {
		module = testgate.ModulePath("go.mod")
	}
	g := testgate.New(os.Stdout, allow, module)
	status := 0
	if len(cmdArgs) == 0 {
		if err := g.Consume(os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "testgate: %v\n", err)
			status = 1
		}
	} else {
		status = runCommand(g, cmdArgs)
	}
	label := allowFile
	if label == "" {
		label = "the allow list (none given)"
	}
	r := g.Finish(label)
	if !r.OK() && status == 0 {
		status = 1
	}
	if r.Disallowed > 0 && hasShort(cmdArgs) {
		fmt.Println("go test ran with -short, which skips the long tests (each says so in its message); make test runs them without it (see TESTFLAGS)")
	}
	return status
}

// hasShort reports whether the command passes go test -short.
func hasShort(args []string) bool {
	for _, a := range args {
		if a == "-short" || a == "--short" || a == "-short=true" || a == "-test.short" {
			return true
		}
	}
	return false
}

// runCommand runs the command with its stdout read by the gate and its
// stderr passed through, and returns its exit status (2 when it cannot be
// started). An interrupt from the terminal reaches the command by itself
// (same process group); the gate waits for it and still reports. SIGTERM
// is passed on.
func runCommand(g *testgate.Gate, args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testgate: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testgate: starting %s: %v\n", args[0], err)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				_ = cmd.Process.Signal(s)
			}
		}
	}()
	readErr := g.Consume(stdout)
	if readErr != nil {
		_, _ = io.Copy(io.Discard, stdout)
	}
	err = cmd.Wait()
	if readErr != nil {
		fmt.Fprintf(os.Stderr, "testgate: %v\n", readErr)
	}
	var exit *exec.ExitError
	switch {
	case err == nil && readErr != nil:
		return 1
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if code := exit.ExitCode(); code > 0 {
			return code
		}
		fmt.Fprintf(os.Stderr, "testgate: %s: %v\n", args[0], err)
		return 1
	default:
		fmt.Fprintf(os.Stderr, "testgate: %s: %v\n", args[0], err)
		return 1
	}
}
