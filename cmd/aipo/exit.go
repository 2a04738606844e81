package main

import (
	"errors"
	"fmt"
	"os"
)

// cmdError is how a command fails: dispatch prints "aipo <command>: " and
// the message on stderr (nothing when the message is empty: the flag
// package or the command has said it already) and exits with code: 2 when
// the command line or the configuration is wrong, 1 when the work failed.
type cmdError struct {
	code int
	msg  string
}

func (e *cmdError) Error() string { return e.msg }

// usageError is a wrong command line or configuration (exit code 2).
func usageError(format string, a ...any) error {
	return &cmdError{code: 2, msg: fmt.Sprintf(format, a...)}
}

// runError is work that failed (exit code 1).
func runError(format string, a ...any) error {
	return &cmdError{code: 1, msg: fmt.Sprintf(format, a...)}
}

// exitCode ends the command with code and prints nothing more.
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &cmdError{code: code}
}

// report prints a command's error, the one place that does, and returns
// the process's exit code. An error of another type is a failed run
// (code 1), printed as errText prints it.
func report(name string, err error) int {
	if err == nil {
		return 0
	}
	var e *cmdError
	if !errors.As(err, &e) {
		e = &cmdError{code: 1, msg: errText(err)}
	}
	if e.msg != "" {
		fmt.Fprintf(os.Stderr, "aipo %s: %s\n", name, e.msg)
	}
	return e.code
}
