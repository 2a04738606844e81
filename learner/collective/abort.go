package collective

import (
	"errors"
	"sync"
)

// Aborted is a communicator's Abort, recorded once: the first reason is
// kept, reported to the other ranks through the group's store, and
// returned by every later operation.
type Aborted struct {
	mu  sync.Mutex
	err error
}

// Mark records an abort of backend's communicator on g for reason (nil:
// "aborted by the caller") unless one is recorded already, and reports
// the first one to the other ranks. It returns the recorded error and
// whether this call recorded it.
func (a *Aborted) Mark(g *Group, backend string, reason error) (error, bool) {
	if reason == nil {
		reason = errors.New("aborted by the caller")
	}
	a.mu.Lock()
	if a.err != nil {
		err := a.err
		a.mu.Unlock()
		return err, false
	}
	err := &OpError{Backend: backend, Op: "abort", Rank: g.Rank(), Size: g.Size(), Kind: ErrAborted, Err: reason}
	a.err = err
	a.mu.Unlock()
	g.ReportFailure(err)
	return err, true
}

// Err is the recorded abort, or nil.
func (a *Aborted) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}
