package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/harness"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/hooks"
	beamlog "github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// The runner's logs (prism's job server and workers, Beam's SDK, the
// libraries that log through slog) are off by default: a pipeline command
// prints aipo's own lines and, when it fails, the first cause of the
// failure in one line. --log-level (or AIPO_LOG) turns them on; --verbose
// prints a failed pipeline's whole error, the runner's plan included.

// logLevelEnv holds the default of --log-level.
const logLevelEnv = "AIPO_LOG"

var (
	logLevelFlag       *string
	verboseFlag        *bool
	storageTimeoutFlag *string
)

func init() {
	// Registered from init, after flags.go's libraryFlags has taken its
	// snapshot: these are aipo's own flags, listed with each command's.
	logLevelFlag = flag.CommandLine.String("log-level", "", "the runner's and libraries' logs on stderr (Beam, prism): off, error, warn, info or debug (default $"+logLevelEnv+", else off)")
	verboseFlag = flag.CommandLine.Bool("verbose", false, "on failure print the whole error, with the runner's plan and every cause, instead of its first cause in one line")
	storageTimeoutFlag = flag.CommandLine.String("storage-timeout", "", storageTimeoutUsage)
}

var storageTimeoutUsage = "longest wait for the object store (gs://) to answer one request, or one read or write of a transfer, e.g. 30s; 0: no bound (default $" + storage.TimeoutEnv + ", else " + storage.DefaultTimeout.String() + ")"

// logLevels are the values of --log-level.
var logLevels = map[string]slog.Level{
	"off":   slog.Level(1 << 20),
	"error": slog.LevelError,
	"warn":  slog.LevelWarn,
	"info":  slog.LevelInfo,
	"debug": slog.LevelDebug,
}

// parseLogLevel resolves --log-level against $AIPO_LOG and the default.
func parseLogLevel(flagValue string) (string, slog.Level, error) {
	v, from := flagValue, "--log-level"
	if v == "" {
		v, from = os.Getenv(logLevelEnv), logLevelEnv
	}
	if v == "" {
		v = "off"
	}
	v = strings.ToLower(strings.TrimSpace(v))
	lv, ok := logLevels[v]
	if !ok {
		return "", 0, fmt.Errorf("%s %q: want off, error, warn, info or debug", from, v)
	}
	return v, lv, nil
}

// initBeam is beam.Init for the pipeline commands, followed by the logging
// setting: it returns an error (exit 2) for a bad --log-level.
func initBeam() error {
	level := *logLevelFlag
	if level == "" && os.Getenv(logLevelEnv) == "" && dataflowDryRun() {
		// A dry run's output is the job, which the runner logs at INFO.
		level = "info"
	}
	name, lv, err := parseLogLevel(level)
	if err != nil {
		return err
	}
	if err := applyStorageTimeout(*storageTimeoutFlag); err != nil {
		return err
	}
	// Beam's own setup (run by beam.Init) installs a text handler at its
	// LogLevel; it only knows debug..error.
	beamName := name
	if name == "off" {
		beamName = "error"
	}
	beamlog.LogLevel = beamName
	if workersHere() {
		// Workers in this process would send their logs to the runner,
		// which prints them (at INFO, and to stderr whatever the level
		// once the channel of a finished worker is full); in-process they
		// log through slog like the runner, at the level asked for.
		hooks.DisableHook(harness.DefaultRemoteLoggingHook)
	}
	beam.Init()
	setLogLevel(lv)
	return nil
}

// runnerFlags are Beam's --runner (lower case) and --environment_type
// (upper case) as given, empty when unset.
func runnerFlags() (runner, env string) {
	if f := flag.Lookup("runner"); f != nil {
		runner = strings.ToLower(f.Value.String())
	}
	if f := flag.Lookup("environment_type"); f != nil {
		env = strings.ToUpper(f.Value.String())
	}
	return runner, env
}

// workersHere reports whether the pipelines' workers run in this process:
// prism (the default) or a portable runner with LOOPBACK workers.
func workersHere() bool {
	runner, env := runnerFlags()
	switch runner {
	case "", "prism", "direct", "directrunner", "prismrunner":
		return true
	}
	return env == "LOOPBACK"
}

// applyStorageTimeout sets the object store's bound from --storage-timeout,
// else from $AIPO_STORAGE_TIMEOUT (which must then be valid too).
func applyStorageTimeout(flagValue string) error {
	v, from := flagValue, "--storage-timeout"
	if v == "" {
		v, from = os.Getenv(storage.TimeoutEnv), storage.TimeoutEnv
	}
	if v == "" {
		return nil
	}
	d, err := storage.ParseTimeout(v)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	storage.SetTimeout(d)
	return nil
}

// setLogLevel routes slog (prism, Beam's SDK) to the console at lv, and
// the standard log package (aipo's own notices, such as a skipped step) to
// the console unfiltered and without timestamps.
func setLogLevel(lv slog.Level) {
	slog.SetDefault(slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: lv})))
	// slog.SetDefault sends the log package to the handler at INFO; aipo's
	// notices are not runner logs, so they are taken back.
	log.SetOutput(console)
	log.SetFlags(0)
}

// console is stderr, through the progress line when one is drawn, so that
// a log line never runs into it.
var console = &consoleSink{w: os.Stderr}

type consoleSink struct {
	mu  sync.Mutex
	p   *progress
	w   io.Writer
	buf []byte
}

func (c *consoleSink) setProgress(p *progress) {
	c.mu.Lock()
	c.p = p
	c.mu.Unlock()
}

// Write writes whole lines: to the progress (which clears its status line
// first) when there is one, to w otherwise.
func (c *consoleSink) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, b...)
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			break
		}
		line := string(c.buf[:i])
		c.buf = c.buf[i+1:]
		if c.p != nil {
			c.p.log(line)
		} else {
			fmt.Fprintln(c.w, line)
		}
	}
	return len(b), nil
}

// Beam's error of a failed job: the job line, the runner's plan of the
// failed stage, then the chain of causes, each after "caused by:".
var (
	causedBy = regexp.MustCompile(`\n\s*caused by:\s*\n`)
	jobLine  = regexp.MustCompile(`:?\s*job \S+ failed:?\s*$`)
	doFnLine = regexp.MustCompile(`^DoFn\[.*\] failed:?$`)
)

// errText is how a command prints err: with --verbose, whole; otherwise a
// failed pipeline's error becomes one line, what aipo said of it (the
// command and the run) followed by the innermost cause, without the
// runner's plan. Errors that are not a runner's are left as they are.
func errText(err error) string {
	s := err.Error()
	if *verboseFlag {
		return s
	}
	return firstCause(s)
}

func firstCause(s string) string {
	parts := causedBy.Split(s, -1)
	if len(parts) < 2 {
		return s
	}
	head, _, _ := strings.Cut(s, "\n")
	head = strings.TrimSpace(jobLine.ReplaceAllString(head, ""))
	var cause []string
	for _, l := range strings.Split(parts[len(parts)-1], "\n") {
		l = strings.TrimSpace(l)
		if l == "" || doFnLine.MatchString(l) {
			continue
		}
		cause = append(cause, l)
	}
	out := strings.Join(cause, " ")
	if head != "" && !strings.HasPrefix(out, head) {
		out = head + ": " + out
	}
	return out + " (--verbose for the runner's whole error)"
}
