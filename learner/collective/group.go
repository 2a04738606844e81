package collective

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options bound the group's waits. Zero fields take the defaults.
type Options struct {
	// RendezvousTimeout bounds Join: reaching the store and waiting for
	// every rank to check in (default 5 minutes; ctx's deadline, when
	// earlier, wins).
	RendezvousTimeout time.Duration
	// OpTimeout bounds a collective whose context has no deadline
	// (default 10 minutes).
	OpTimeout time.Duration
	// Heartbeat is how often a rank reports to the store (default 1 s).
	Heartbeat time.Duration
	// StaleAfter is how old a rank's last heartbeat may be before a
	// failed operation names it as stalled (default 5 heartbeats).
	StaleAfter time.Duration
	// StallAfter is how long a rank's heartbeat (or the store, served by
	// rank 0) may be silent while this rank waits in a collective before
	// the collective is interrupted and fails naming it, instead of
	// waiting out its deadline (default 2 StaleAfter: 10 s). A rank that
	// computes for long still beats; one that is stopped does not.
	StallAfter time.Duration
	// CloseTimeout bounds how long rank 0's Close keeps the store up for
	// the ranks still running (default 30 s).
	CloseTimeout time.Duration
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.RendezvousTimeout, 5*time.Minute)
	def(&o.OpTimeout, 10*time.Minute)
	def(&o.Heartbeat, time.Second)
	def(&o.StaleAfter, 5*o.Heartbeat)
	def(&o.StallAfter, 2*o.StaleAfter)
	def(&o.CloseTimeout, 30*time.Second)
	return o
}

// Group is this process's membership in the job: the store (served here
// on rank 0), a heartbeat, and what is needed to open communicators and to
// explain their failures.
type Group struct {
	env  Env
	opts Options

	server *Server // rank 0 only
	store  *Store  // control: rendezvous and engine setup
	health *Store  // heartbeats, failure reports, diagnosis

	stop    chan struct{}
	beating sync.WaitGroup

	mu     sync.Mutex
	comms  int
	closed bool
}

// Join forms the group: rank 0 starts the store on MASTER_ADDR:MASTER_PORT,
// every rank connects to it (retrying until it is up), checks in with its
// rank and world size, and waits for every other rank, all within the
// rendezvous bound. A rank that never arrives fails the others with a
// *RendezvousError naming it; a WORLD_SIZE that disagrees with rank 0's is
// an error naming both.
func Join(ctx context.Context, env Env, opts Options) (*Group, error) {
	opts = opts.withDefaults()
	if env.WorldSize < 1 || env.Rank < 0 || env.Rank >= env.WorldSize {
		return nil, &EnvError{Var: "RANK", Value: strconv.Itoa(env.Rank), Problem: fmt.Sprintf("it must be in [0, %d)", env.WorldSize), Fix: "give each process a distinct rank below WORLD_SIZE"}
	}
	bound := opts.RendezvousTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < bound {
		bound = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	rerr := func(reason string, err error, missing ...int) error {
		return &RendezvousError{Rank: env.Rank, Size: env.WorldSize, Store: env.StoreAddr(), Timeout: bound, Missing: missing, Reason: reason, Err: err}
	}
	g := &Group{env: env, opts: opts, stop: make(chan struct{})}
	if env.Rank == 0 {
		ln, err := net.Listen("tcp", env.StoreAddr())
		if err != nil {
			return nil, rerr("rank 0 could not serve the store; set MASTER_ADDR to an address of this machine and MASTER_PORT to a free port", err)
		}
		g.server = Serve(ln, env.WorldSize)
	}
	fail := func(err error) (*Group, error) {
		g.closeConns()
		return nil, err
	}
	var err error
	if g.health, err = DialStore(ctx, env.StoreAddr(), bound); err != nil {
		return fail(rerr("the store (served by rank 0) did not answer; is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same on every rank?", err, 0))
	}
	if g.store, err = DialStore(ctx, env.StoreAddr(), bound); err != nil {
		return fail(rerr("the store (served by rank 0) did not answer", err, 0))
	}
	g.store.Default, g.health.Default = bound, opts.Heartbeat
	if _, _, err := g.health.call(opHello, "hello", 0, []byte(strconv.Itoa(env.Rank)), []byte(strconv.Itoa(env.WorldSize))); err != nil {
		return fail(rerr("", err))
	}
	keys := make([]string, env.WorldSize)
	for r := range keys {
		keys[r] = arrivedKey(r)
	}
	g.startHeartbeat()
	if err := g.store.Wait(ctx, keys...); err != nil {
		var se *StoreError
		if errors.As(err, &se) && len(se.Missing) > 0 {
			var missing []int
			for _, k := range se.Missing {
				r, _ := strconv.Atoi(strings.TrimPrefix(k, arrivedKey(0)[:len(arrivedKey(0))-1]))
				missing = append(missing, r)
			}
			g.leave(min(bound, 2*time.Second))
			return nil, rerr("start them with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE", nil, missing...)
		}
		g.leave(min(bound, 2*time.Second))
		return nil, rerr("", err)
	}
	return g, nil
}

// Env is the launcher environment the group was formed from.
func (g *Group) Env() Env { return g.env }

// Rank is this process's rank.
func (g *Group) Rank() int { return g.env.Rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.env.WorldSize }

// Options are the group's bounds, defaults filled in.
func (g *Group) Options() Options { return g.opts }

// Store is the control connection to the group's store, for engines to
// exchange their setup (addresses, NCCL's unique id).
func (g *Group) Store() *Store { return g.store }

// NextPrefix returns a key prefix unique to the next communicator opened
// on this group; every rank gets the same sequence.
func (g *Group) NextPrefix(backend string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.comms++
	return fmt.Sprintf("%s/%d/", backend, g.comms)
}

func (g *Group) startHeartbeat() {
	g.beating.Add(1)
	go func() {
		defer g.beating.Done()
		t := time.NewTicker(g.opts.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				// A failed beat leaves the connection broken; the other
				// ranks then see this rank's heartbeat age grow.
				g.health.call(opBeat, "heartbeat", 0)
			}
		}
	}()
}

func (g *Group) stopHeartbeat() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.beating.Wait()
}

// ReportFailure records err in the store so that the other ranks' errors
// can name this rank and its reason. It is best effort and bounded.
func (g *Group) ReportFailure(err error) {
	msg := err.Error()
	var oe *OpError
	if errors.As(err, &oe) {
		// Its own failure only: the suspects it names are reported by
		// the store to every rank anyway.
		msg = oe.summary()
	}
	if len(msg) > 500 {
		msg = msg[:500] + "..."
	}
	g.health.call(opSet, "set", 0, []byte(failedKey(g.env.Rank)), []byte(msg))
}

// Health asks the store what it knows of every rank.
func (g *Group) Health() ([]PeerState, error) {
	_, vals, err := g.health.call(opHealth, "health", 0)
	if err != nil {
		return nil, err
	}
	if len(vals) != 1 {
		return nil, errors.New("malformed health reply")
	}
	var entries []healthEntry
	if err := json.Unmarshal(vals[0], &entries); err != nil {
		return nil, err
	}
	out := make([]PeerState, len(entries))
	for i, e := range entries {
		out[i] = PeerState{Rank: e.Rank, SinceBeat: time.Duration(e.SinceBeat) * time.Millisecond, Gone: e.Gone,
			GoneFor: time.Duration(e.GoneFor) * time.Millisecond, Left: e.Left, Failed: e.Failed}
		if e.SinceBeat < 0 {
			out[i].SinceBeat = -1
		}
	}
	return out, nil
}

// Suspects returns the other ranks that look responsible for a failure:
// those whose process is gone, whose heartbeat is older than StaleAfter,
// or that reported a failure, in that order. When none shows yet it asks
// again until within has passed: a killed peer's connection closes a
// moment after the engine notices, and a stalled one's heartbeat ages.
// When the store does not answer, rank 0 (which serves it) is the suspect.
func (g *Group) Suspects(within time.Duration) []PeerState {
	deadline := time.Now().Add(within)
	for {
		states, err := g.Health()
		if err != nil {
			return []PeerState{{Rank: 0, SinceBeat: -1, Unreachable: err.Error()}}
		}
		var gone, stale, failed []PeerState
		for _, p := range states {
			switch {
			case p.Rank == g.env.Rank:
			case p.Gone:
				gone = append(gone, p)
			case !p.Left && p.SinceBeat > g.opts.StaleAfter:
				stale = append(stale, p)
			case p.Failed != "":
				failed = append(failed, p)
			}
		}
		// A reported failure is enough once a killed peer's closed
		// connection would have shown.
		settled := len(failed) > 0 && time.Since(deadline.Add(-within)) > min(within, 500*time.Millisecond)
		if len(gone)+len(stale) > 0 || settled || time.Now().After(deadline) {
			sort.Slice(stale, func(i, j int) bool { return stale[i].SinceBeat > stale[j].SinceBeat })
			return append(append(gone, stale...), failed...)
		}
		time.Sleep(min(100*time.Millisecond, max(time.Until(deadline), time.Millisecond)))
	}
}

// OpFailed builds the error of a failed collective: it names the ranks
// that look responsible and reports this rank's failure to the store.
func (g *Group) OpFailed(backend, op string, kind error, elapsed, bound time.Duration, cause error) *OpError {
	e := &OpError{Backend: backend, Op: op, Rank: g.env.Rank, Size: g.env.WorldSize, Kind: kind, Elapsed: elapsed, Timeout: bound, Err: cause}
	if kind == ErrTimeout || kind == ErrPeerLost {
		e.Suspects = g.Suspects(g.opts.StaleAfter + 2*g.opts.Heartbeat)
	}
	g.ReportFailure(e)
	return e
}

// Close leaves the group cleanly. On rank 0 it keeps the store up until
// every other rank has left or died, within CloseTimeout, so that their
// last calls and diagnoses are answered.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	g.leave(g.opts.CloseTimeout)
	return nil
}

// leave stops the heartbeat, tells the store this rank is leaving and, on
// rank 0, keeps serving until every rank that checked in has left, died or
// stalled, within linger; then it closes the connections and the store.
func (g *Group) leave(linger time.Duration) {
	g.stopHeartbeat()
	g.health.call(opLeave, "leave", 0)
	if g.server != nil {
		deadline := time.Now().Add(linger)
		for time.Now().Before(deadline) {
			states, err := g.Health()
			if err != nil {
				break
			}
			done := true
			for _, p := range states {
				if p.Rank != g.env.Rank && !p.Left && !p.Gone && p.SinceBeat >= 0 && p.SinceBeat < g.opts.StaleAfter {
					done = false
				}
			}
			if done {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	g.closeConns()
}

func (g *Group) closeConns() {
	if g.health != nil {
		g.health.Close()
	}
	if g.store != nil {
		g.store.Close()
	}
	if g.server != nil {
		g.server.Close()
	}
}
