package collective

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// A Watch follows the other ranks' heartbeats while this rank waits in a
// collective. A rank that is stopped (SIGSTOP, a hung host, a network
// partition) keeps its connections open and answers nothing, so the
// engine alone would wait for the operation's whole deadline (10 minutes
// by default); its heartbeat, though, stops within a second. When a rank's
// heartbeat has been silent for StallAfter, or the store (rank 0) has not
// answered for as long, the Watch calls interrupt once, which makes the
// engine's operation fail now; Stalled then names the rank.
type Watch struct {
	g    *Group
	stop chan struct{}
	done sync.WaitGroup

	mu      sync.Mutex
	stalled []PeerState // the ranks found stalled, when interrupt was called
}

// Watch starts following the other ranks for one operation; Stop ends it.
// interrupt is called at most once, from the Watch's goroutine. A group of
// one rank has nobody to watch.
func (g *Group) Watch(interrupt func()) *Watch {
	w := &Watch{g: g, stop: make(chan struct{})}
	if g.Size() < 2 {
		return w
	}
	w.done.Add(1)
	go w.run(interrupt)
	return w
}

func (w *Watch) run(interrupt func()) {
	defer w.done.Done()
	t := time.NewTicker(w.g.opts.Heartbeat)
	defer t.Stop()
	lastAnswer := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		states, err := w.g.Health()
		var stalled []PeerState
		switch {
		case err != nil:
			if silent := time.Since(lastAnswer); silent > w.g.opts.StallAfter {
				stalled = []PeerState{{Rank: 0, SinceBeat: silent, Unreachable: err.Error()}}
			}
		default:
			lastAnswer = time.Now()
			for _, p := range states {
				if p.Rank != w.g.Rank() && !p.Left && !p.Gone && p.SinceBeat > w.g.opts.StallAfter {
					stalled = append(stalled, p)
				}
			}
		}
		if len(stalled) > 0 {
			w.mu.Lock()
			w.stalled = stalled
			w.mu.Unlock()
			interrupt()
			return
		}
	}
}

// Stop ends the Watch and waits for its goroutine; after it, interrupt is
// not called any more.
func (w *Watch) Stop() {
	close(w.stop)
	w.done.Wait()
}

// Stalled returns the ranks the Watch found stalled (nil when it did not
// interrupt), and an error that says so, to wrap the engine's own.
func (w *Watch) Stalled() ([]PeerState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.stalled) == 0 {
		return nil, nil
	}
	var parts []string
	for _, p := range w.stalled {
		if p.Unreachable != "" {
			parts = append(parts, fmt.Sprintf("the store (rank 0) did not answer for %.1f s", p.SinceBeat.Seconds()))
		} else {
			parts = append(parts, fmt.Sprintf("rank %d's heartbeat stopped %.1f s ago", p.Rank, p.SinceBeat.Seconds()))
		}
	}
	return w.stalled, fmt.Errorf("%s (more than the %s a rank may be silent, Options.StallAfter): the operation was interrupted rather than left to its deadline", strings.Join(parts, ", "), w.g.opts.StallAfter)
}
