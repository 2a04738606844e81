package train

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
)

// rolloutRan is set once a rollout of this process has returned. The
// first pipeline a process runs on Beam's portable runners (universal,
// Flink, Spark) may set Beam's global environment flag without a lock (its
// default container image when --environment_config is empty), so the
// asynchronous loop starts no second rollout before the first has
// returned; from then on pipelines only read the flags and may run at
// once. The local runner (internal/beamrun) starts its job server under a
// lock and sets no flag.
var rolloutRan atomic.Bool

// loop is one invocation of the training loop: the steps it rolls out and
// learns.
type loop struct {
	cfg   runconfig.Config
	opts  Options
	start time.Time

	emitMu sync.Mutex

	learner *learnSession // the learner steps, with the training state kept between them
	board   Follower      // TensorBoard's event files (nil: run.tensorboard off)

	// resampled: the loop was entered again at a step being rolled out
	// again (resample.go).
	resampled bool

	// partialMu guards partial, the engine of the run's rollouts under
	// rollout.partial with the in-process policy: one engine for every
	// step, advanced to each new checkpoint, so that the samples in
	// flight continue on it.
	partialMu sync.Mutex
	partial   *inproc.RunEngine
}

func newLoop(cfg runconfig.Config, opts Options, start time.Time) *loop {
	return &loop{cfg: cfg, opts: opts, start: start}
}

// pushes says whether the run's checkpoints are pushed to policy servers
// (Options.Servers) before the steps they sample.
func (lp *loop) pushes() bool {
	return !lp.cfg.InProcessPolicy() && lp.cfg.Policy.Sync.Pushes()
}

func (lp *loop) emit(e Event) {
	if lp.opts.Progress == nil {
		return
	}
	e.Steps, e.Elapsed = lp.cfg.Run.Steps, time.Since(lp.start)
	lp.emitMu.Lock()
	defer lp.emitMu.Unlock()
	lp.opts.Progress(e)
}

// evaluate evaluates checkpoint k (Options.Evaluate).
func (lp *loop) evaluate(ctx context.Context, k int64) error {
	if lp.opts.Evaluate == nil {
		return nil
	}
	return lp.opts.Evaluate(ctx, lp.cfg, k, lp.emit)
}

// follow brings the board up to date with the run's records, if the run
// has one.
func (lp *loop) follow(ctx context.Context) {
	if lp.board != nil {
		lp.board.Sync(ctx)
	}
}

// sampler is the checkpoint whose weights sample step k: k itself, or in
// an asynchronous run the one before (checkpoint 0 samples step 0).
func (lp *loop) sampler(k int64) int64 {
	if lp.cfg.Run.Async && k > 0 {
		return k - 1
	}
	return k
}

// rollout commits step k, sampled by checkpoint s, unless it is committed.
// prev, when not nil, is closed once step k-1 is committed: under
// rollout.carry the rollout waits for it after the push of checkpoint s
// (which interrupts step k-1's samples, closing its batch), since it
// continues the groups step k-1 carries.
func (lp *loop) rollout(ctx context.Context, k, s int64, prev <-chan struct{}) error {
	lp.emit(Event{Step: k, Phase: "rollout"})
	committed, err := storage.Exists(ctx, rundir.Manifest(rundir.Step(lp.cfg.Run.Dir, k)))
	if err != nil || committed {
		return err
	}
	waitPrev := func() error {
		if prev == nil {
			return nil
		}
		select {
		case <-prev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if lp.cfg.InProcessPolicy() && lp.cfg.Rollout.Partial {
		var endpoint string
		if endpoint, err = lp.partialEngine(ctx, s, k); err == nil {
			if err = waitPrev(); err == nil {
				c := lp.cfg
				c.Policy.Endpoint = endpoint
				err = lp.opts.Rollout(ctx, c, k)
				rolloutRan.Store(true)
			}
		}
	} else if lp.cfg.InProcessPolicy() {
		err = withEngine(ctx, lp.cfg, s, "", func(endpoint string) error {
			c := lp.cfg
			c.Policy.Endpoint = endpoint
			defer rolloutRan.Store(true)
			return lp.opts.Rollout(ctx, c, k)
		})
	} else {
		if err := lp.opts.Servers.Serve(ctx, k, s); err != nil {
			return err
		}
		c := lp.cfg
		if c.Policy.Endpoint, err = lp.opts.Servers.Endpoint(ctx, k, s); err == nil {
			if err = waitPrev(); err == nil {
				err = lp.opts.Rollout(ctx, c, k)
				rolloutRan.Store(true)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("train: rollout of step %d: %w", k, err)
	}
	return nil
}

// pinned says whether the run's partial rollouts are split where the
// configuration says (rollout.partial_tokens): each policy call names the
// checkpoint that samples it, and the engine keeps two.
func (lp *loop) pinned() bool {
	return lp.cfg.InProcessPolicy() && lp.cfg.Rollout.Partial && lp.cfg.Rollout.PartialTokens > 0
}

// partialEngine makes the run's partial-rollout engine serve checkpoint s
// for the rollout of step k (opening it on the first call; a newer
// checkpoint interrupts the generations on the older one, unless the
// calls are pinned) and returns its endpoint. With pinned calls it also
// loads checkpoint k when it is committed (a resumed run's first
// rollout): step k's samples continue on it, and no later rollout of
// this process may come to load it.
func (lp *loop) partialEngine(ctx context.Context, s, k int64) (string, error) {
	lp.partialMu.Lock()
	defer lp.partialMu.Unlock()
	dir := rundir.Checkpoint(lp.cfg.Run.Dir, s)
	if lp.partial == nil {
		e, err := inproc.OpenRunEngine(ctx, dir, inproc.RunEngineName(lp.cfg.Run.Name, "partial", 0), lp.cfg.Learner.Backend, lp.cfg.Policy.DType, lp.pinned())
		if err != nil {
			return "", err
		}
		lp.partial = e
	} else if err := lp.partial.Advance(ctx, dir, s); err != nil {
		return "", err
	}
	if lp.pinned() && k > s {
		next := rundir.Checkpoint(lp.cfg.Run.Dir, k)
		committed, err := storage.Exists(ctx, rundir.Committed(next))
		if err != nil {
			return "", err
		}
		if committed {
			if err := lp.partial.Advance(ctx, next, k); err != nil {
				return "", err
			}
		}
	}
	return lp.partial.Endpoint(), nil
}

// advancePartial loads checkpoint k, just committed, into the run's
// partial-rollout engine when the calls are pinned: the samples of step k
// wait for it to continue past rollout.partial_tokens.
func (lp *loop) advancePartial(ctx context.Context, k int64) error {
	if !lp.pinned() || k >= lp.cfg.Run.Steps {
		return nil
	}
	lp.partialMu.Lock()
	defer lp.partialMu.Unlock()
	if lp.partial == nil {
		return nil // no rollout opened it yet; the one of step k will load k
	}
	return lp.partial.Advance(ctx, rundir.Checkpoint(lp.cfg.Run.Dir, k), k)
}

// closePartial closes the partial-rollout engine, if one was opened.
func (lp *loop) closePartial() {
	lp.partialMu.Lock()
	defer lp.partialMu.Unlock()
	if lp.partial != nil {
		lp.partial.Close()
		lp.partial = nil
	}
}

// learn runs learner step k and what follows it: the evaluation of
// checkpoint k+1 when due, the rebuilt metrics and TensorBoard's events.
func (lp *loop) learn(ctx context.Context, k int64) error {
	lp.emit(Event{Step: k, Phase: "learn"})
	lm, err := lp.learner.Learn(ctx, k)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if lp.opts.Log != nil {
		for _, w := range []string{records.FailureWarning(k, lm.Rollout), signalWarning(lp.cfg, lm)} {
			if w != "" {
				lp.opts.Log(w)
			}
		}
	}
	lp.emit(Event{Step: k, Phase: "learn", Learn: &lm})
	if err := lp.evaluate(ctx, k+1); err != nil {
		return err
	}
	if err := RebuildMetrics(ctx, lp.cfg.Run.Dir); err != nil {
		return err
	}
	lp.follow(ctx)
	return nil
}

// runSync is the synchronous loop: rollout k on checkpoint k, then learn
// k, strictly in turn.
func (lp *loop) runSync(ctx context.Context, k int64) error {
	done := int64(0)
	for ; k < lp.cfg.Run.Steps; k++ {
		if lp.opts.StopAfter > 0 && done >= lp.opts.StopAfter {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := lp.rollout(ctx, k, k, nil); err != nil {
			return err
		}
		if err := lp.learn(ctx, k); err != nil {
			return err
		}
		done++
	}
	return lp.finish(ctx, done)
}

// runAsync is the overlapped loop: step j is sampled by checkpoint j-1,
// so its rollout starts as soon as learner step j-2 has committed that
// checkpoint, while step j-1 may still be rolling out and learner step
// j-1 waits for it. Which checkpoint samples a step never depends on
// timing, so a run killed at any moment resumes to the same checkpoints.
func (lp *loop) runAsync(ctx context.Context, k0 int64) error {
	steps := lp.cfg.Run.Steps
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errMu sync.Mutex
	var first error
	fail := func(err error) {
		errMu.Lock()
		if first == nil {
			first = err
		}
		errMu.Unlock()
		cancel()
	}
	g := newGates(steps, k0)
	defer lp.closePartial()
	launched := make(chan struct{})
	go func() {
		defer close(launched)
		lp.launchRollouts(ctx, k0, g, fail)
	}()
	done := int64(0)
	for k := k0; k < steps; k++ {
		if lp.opts.StopAfter > 0 && done >= lp.opts.StopAfter {
			break
		}
		select {
		case <-g.rolled[k]:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if err := lp.learn(ctx, k); err != nil {
			fail(err)
			break
		}
		if err := lp.advancePartial(ctx, k+1); err != nil {
			fail(fmt.Errorf("train: partial rollouts: checkpoint %d: %w", k+1, err))
			break
		}
		close(g.ready[k+1])
		done++
	}
	close(g.stop)
	<-launched
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if lp.opts.StopAfter > 0 && done >= lp.opts.StopAfter {
		return nil
	}
	return lp.finish(ctx, done)
}

// gates order the overlapped loop's rollouts and learner steps.
type gates struct {
	ready  []chan struct{} // ready[j] is closed once checkpoint j is committed
	rolled []chan struct{} // rolled[j] is closed once step j is committed
	stop   chan struct{}   // closed when no new rollout may start
}

// newGates are the gates of a run of steps resumed at k0: checkpoints up
// to k0 are there.
func newGates(steps, k0 int64) gates {
	g := gates{ready: make([]chan struct{}, steps+1), rolled: make([]chan struct{}, steps), stop: make(chan struct{})}
	for j := range g.ready {
		g.ready[j] = make(chan struct{})
		if int64(j) <= k0 {
			close(g.ready[j])
		}
	}
	for j := range g.rolled {
		g.rolled[j] = make(chan struct{})
	}
	return g
}

// launchRollouts starts the rollout of each step from k0 once the
// checkpoint that samples it is committed, until the last step, g.stop or
// ctx; it returns when every rollout it started has ended. A rollout that
// fails calls fail.
func (lp *loop) launchRollouts(ctx context.Context, k0 int64, g gates, fail func(error)) {
	alone := lp.resampled
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for j := k0; j < lp.cfg.Run.Steps; j++ {
		s := lp.sampler(j)
		select {
		case <-g.ready[s]:
		case <-g.stop:
			return
		case <-ctx.Done():
			return
		}
		select {
		case <-g.stop:
			return
		default:
		}
		var prev <-chan struct{}
		if lp.cfg.Rollout.Carry && j > k0 {
			prev = g.rolled[j-1] // its carried groups (step k0-1's are committed)
		}
		inflight.Add(1)
		finished := make(chan struct{})
		go func() {
			defer inflight.Done()
			defer close(finished)
			if err := lp.rollout(ctx, j, s, prev); err != nil {
				fail(err)
				return
			}
			close(g.rolled[j])
		}()
		if !rolloutRan.Load() || (alone && j == k0) {
			// No rollout pipeline has run in this process yet: let this
			// one start the runner alone (see rolloutRan). A step rolled
			// out again (resample) also runs alone: the next one's push
			// would move the servers on under it.
			select {
			case <-finished:
			case <-ctx.Done():
				return
			}
		}
	}
}

// finish tells the servers to serve the final checkpoint, when this
// invocation trained.
func (lp *loop) finish(ctx context.Context, done int64) error {
	if done == 0 {
		return nil
	}
	if lp.cfg.InProcessPolicy() {
		return nil
	}
	if err := lp.opts.Servers.Finish(ctx); err != nil {
		return fmt.Errorf("train: all %d steps are trained, but policy.sync could not give the servers the final checkpoint: %w", lp.cfg.Run.Steps, err)
	}
	return nil
}
