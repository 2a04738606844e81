package collective

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The kinds of failure. An *OpError or *RendezvousError matches exactly one
// of them with errors.Is.
var (
	// ErrTimeout: the operation's deadline passed before it completed.
	ErrTimeout = errors.New("deadline exceeded")
	// ErrPeerLost: the engine lost a connection to another rank.
	ErrPeerLost = errors.New("lost a peer")
	// ErrAborted: Abort was called, here or (for NCCL) by the watchdog.
	ErrAborted = errors.New("communicator aborted")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("communicator closed")
	// ErrInvalid: the arguments disagree (lengths, counts, root, memory kind).
	ErrInvalid = errors.New("invalid argument")
	// ErrEngine: the engine failed for another reason.
	ErrEngine = errors.New("engine error")
	// ErrUnavailable: the backend is not in this binary or its library is
	// missing on this machine.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrRendezvous: the ranks could not meet.
	ErrRendezvous = errors.New("rendezvous failed")
)

// PeerState is what rank 0's store knew of one rank when an operation
// failed.
type PeerState struct {
	Rank int
	// SinceBeat is the time since the rank's last heartbeat reached the
	// store; negative when none ever did.
	SinceBeat time.Duration
	// Gone: its store connection closed without a clean Close (the
	// process exited or was killed); GoneFor is how long ago.
	Gone    bool
	GoneFor time.Duration
	// Left: it closed its group cleanly.
	Left bool
	// Failed is the failure it reported itself, if any.
	Failed string
	// Unreachable is set on rank 0's entry when the store itself did not
	// answer (rank 0 serves it).
	Unreachable string
}

// String says what happened to the rank in one phrase.
func (p PeerState) String() string {
	switch {
	case p.Unreachable != "":
		return fmt.Sprintf("rank %d (which serves the store) is unreachable: %s", p.Rank, p.Unreachable)
	case p.Gone:
		return fmt.Sprintf("rank %d exited or lost its connection (%.1f s ago, last heartbeat %s)", p.Rank, p.GoneFor.Seconds(), beatAge(p.SinceBeat))
	case p.Failed != "":
		return fmt.Sprintf("rank %d reported a failure of its own: %s", p.Rank, p.Failed)
	case p.Left:
		return fmt.Sprintf("rank %d has already closed its group", p.Rank)
	case p.SinceBeat < 0:
		return fmt.Sprintf("rank %d never sent a heartbeat", p.Rank)
	default:
		return fmt.Sprintf("rank %d stopped answering (last heartbeat %s)", p.Rank, beatAge(p.SinceBeat))
	}
}

func beatAge(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s ago", d.Seconds())
}

// OpError is a failed collective.
type OpError struct {
	Backend string // "gloo" or "nccl"
	Op      string // "allreduce", "reducescatter", ...
	Rank    int    // this process's rank
	Size    int
	Kind    error         // one of the Err* values
	Elapsed time.Duration // from the call to the failure
	Timeout time.Duration // the bound the operation ran under
	// Suspects are the other ranks that look responsible, most likely
	// first: exited, stalled, or failed on their own. Empty when every
	// other rank still answers (the error is then local or the engine's).
	Suspects []PeerState
	Err      error // the engine's own error, when there is one
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "collective: %s %s on rank %d of %d: %v", e.Backend, e.Op, e.Rank, e.Size, e.Kind)
	if e.Kind == ErrTimeout {
		fmt.Fprintf(&b, " (bound %s)", e.Timeout.Round(time.Millisecond))
	}
	if e.Elapsed > 0 {
		fmt.Fprintf(&b, " after %.1f s", e.Elapsed.Seconds())
	}
	if len(e.Suspects) > 0 {
		parts := make([]string, len(e.Suspects))
		for i, s := range e.Suspects {
			parts[i] = s.String()
		}
		b.WriteString(": " + strings.Join(parts, "; "))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " [%v]", e.Err)
	}
	return b.String()
}

// summary is the error without its suspects: what this rank itself saw.
func (e *OpError) summary() string {
	s := fmt.Sprintf("%s %s: %v", e.Backend, e.Op, e.Kind)
	if e.Err != nil {
		s += fmt.Sprintf(" [%v]", e.Err)
	}
	return s
}

// Unwrap lets errors.Is match both the kind and the engine's error.
func (e *OpError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// SuspectRanks lists the ranks of Suspects.
func (e *OpError) SuspectRanks() []int {
	out := make([]int, len(e.Suspects))
	for i, s := range e.Suspects {
		out[i] = s.Rank
	}
	return out
}

// RendezvousError is a group that could not form.
type RendezvousError struct {
	Rank, Size int
	Store      string // MASTER_ADDR:MASTER_PORT
	Timeout    time.Duration
	Missing    []int // ranks that did not arrive in time
	Reason     string
	Err        error
}

func (e *RendezvousError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "collective: rendezvous of rank %d of %d at %s", e.Rank, e.Size, e.Store)
	if len(e.Missing) > 0 {
		sort.Ints(e.Missing)
		fmt.Fprintf(&b, ": %s did not arrive within %s", rankList(e.Missing), e.Timeout)
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *RendezvousError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrRendezvous}
	}
	return []error{ErrRendezvous, e.Err}
}

// rankList formats ranks as "rank 2" or "ranks 1, 3".
func rankList(r []int) string {
	if len(r) == 1 {
		return fmt.Sprintf("rank %d", r[0])
	}
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprint(v)
	}
	return "ranks " + strings.Join(s, ", ")
}

// EnvError is a launcher variable that is missing or wrong.
type EnvError struct {
	Var     string // the variable, e.g. "WORLD_SIZE"
	Value   string // what it held ("" when unset)
	Problem string
	Fix     string
}

func (e *EnvError) Error() string {
	v := "unset"
	if e.Value != "" {
		v = fmt.Sprintf("%q", e.Value)
	}
	return fmt.Sprintf("collective: %s is %s: %s; %s", e.Var, v, e.Problem, e.Fix)
}

// Invalid returns an ErrInvalid error for a bad argument of op.
func Invalid(backend, op string, format string, args ...any) error {
	return fmt.Errorf("collective: %s %s: %w: %s", backend, op, ErrInvalid, fmt.Sprintf(format, args...))
}
