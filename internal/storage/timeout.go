package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Every wait for an object store is bounded: an operation (a stat, a list,
// a small write, opening a read) gets at most Timeout() to be answered, and
// a streamed read or write at most Timeout() per Read or Write call, so a
// store that stops answering mid-transfer is noticed too. Past the bound
// the operation fails with a *TimeoutError naming the store's address and
// the last cause seen (connection refused, no route, ...), instead of the
// client library retrying for as long as the context lives.

// DefaultTimeout is the bound when none is set: the longest wait for an
// object store's first byte.
const DefaultTimeout = 30 * time.Second

// TimeoutEnv names the environment variable that sets the bound (a Go
// duration such as 30s or 2m; 0 turns it off). Commands' --storage-timeout
// flag takes precedence.
const TimeoutEnv = "AIPO_STORAGE_TIMEOUT"

var timeoutNanos atomic.Int64

func init() {
	d := DefaultTimeout
	if v := os.Getenv(TimeoutEnv); v != "" {
		if p, err := ParseTimeout(v); err == nil {
			d = p
		}
	}
	timeoutNanos.Store(int64(d))
}

// ParseTimeout parses a bound as TimeoutEnv and --storage-timeout take it.
func ParseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("storage timeout %q: want a duration such as 30s or 2m (0: no bound)", s)
	}
	return d, nil
}

// SetTimeout sets the bound of every later remote operation; 0 removes it.
func SetTimeout(d time.Duration) { timeoutNanos.Store(int64(d)) }

// Timeout is the bound of remote operations.
func Timeout() time.Duration { return time.Duration(timeoutNanos.Load()) }

// TimeoutError is an object store that did not answer within the bound.
type TimeoutError struct {
	Op, Path string
	Addr     string        // the store's address
	After    time.Duration // the bound
	Cause    string        // the last failure seen while waiting, if any
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("storage: %s %s: no answer from %s within %s", e.Op, e.Path, e.Addr, e.After)
	if e.Cause != "" {
		s += ": " + e.Cause
	}
	return s + fmt.Sprintf(" (check the address and the network; --storage-timeout or %s sets the bound)", TimeoutEnv)
}

// Is makes a TimeoutError a context.DeadlineExceeded for errors.Is.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// storeAddr is the address remote operations reach.
func storeAddr() string {
	if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
		return h + " (STORAGE_EMULATOR_HOST)"
	}
	return "storage.googleapis.com:443"
}

// errNoAnswer is the cause of a watch's context once its bound has passed.
var errNoAnswer = errors.New("storage: no answer within the bound")

// watch bounds the waits of one remote operation: its context is cancelled
// when a wait (between arm and disarm) lasts longer than the bound.
type watch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	d      time.Duration
}

// newWatch starts a watch whose first wait is armed.
func newWatch(parent context.Context) *watch {
	w := &watch{d: Timeout()}
	w.ctx, w.cancel = context.WithCancelCause(parent)
	if w.d > 0 {
		w.timer = time.AfterFunc(w.d, func() { w.cancel(errNoAnswer) })
	}
	return w
}

// arm starts a wait.
func (w *watch) arm() {
	if w.timer != nil {
		w.timer.Reset(w.d)
	}
}

// disarm ends a wait: the time until the next arm is the caller's.
func (w *watch) disarm() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// close ends the operation.
func (w *watch) close() {
	w.disarm()
	w.cancel(context.Canceled)
}

// fired reports whether the bound passed.
func (w *watch) fired() bool { return context.Cause(w.ctx) == errNoAnswer }

// wrap turns err, when the bound passed, into a TimeoutError.
func (w *watch) wrap(op, p string, err error) error {
	if err == nil || !w.fired() {
		return err
	}
	return &TimeoutError{Op: op, Path: p, Addr: storeAddr(), After: w.d, Cause: lastCause(err)}
}

// bounded runs one remote operation under the bound.
func bounded(ctx context.Context, op, p string, f func(ctx context.Context) error) error {
	w := newWatch(ctx)
	defer w.close()
	return w.wrap(op, p, f(w.ctx))
}

// lastCause is the network failure behind err (the client library reports
// the last attempt's error after the context's), or "" when the wait ended
// before any failure was seen.
func lastCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && !errors.Is(op.Err, context.Canceled) {
		return op.Error()
	}
	s := err.Error()
	if i := strings.LastIndex(s, "last error: "); i >= 0 {
		s = s[i+len("last error: "):]
	}
	if strings.Contains(s, "context canceled") || strings.Contains(s, "operation was canceled") {
		return "" // only the cancellation: nothing answered at all
	}
	return s
}
