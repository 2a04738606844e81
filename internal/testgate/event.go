package testgate

import (
	"encoding/json"
	"strings"
)

// Event is one line of `go test -json` (cmd/test2json's TestEvent, with
// the build events of go1.24 and later).
type Event struct {
	Action      string  // start, run, pause, cont, output, pass, fail, skip, bench, build-output, build-fail
	Package     string  // the package's import path; empty on build events
	Test        string  // the test's name (TestX/sub for a subtest); empty for the package
	Elapsed     float64 // seconds, on pass, fail and skip
	Output      string  // on output and build-output
	FailedBuild string  // on a package's fail: the build that failed
	ImportPath  string  // on build-output and build-fail
}

// parseEvent decodes one line of the stream; ok is false for a line that
// is not an event (go test's own errors, text piped in beside the stream).
func parseEvent(line []byte) (Event, bool) {
	var e Event
	trimmed := strings.TrimSpace(string(line))
	if !strings.HasPrefix(trimmed, "{") {
		return e, false
	}
	if err := json.Unmarshal([]byte(trimmed), &e); err != nil || e.Action == "" {
		return e, false
	}
	return e, true
}

// framing reports whether a line of test output is test2json's framing of
// a verbose run (=== RUN and the like), which plain go test does not print.
func framing(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}
