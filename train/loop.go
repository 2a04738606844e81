package train

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/records/tensorboard"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// rolloutRan is set once a rollout of this process has returned. The
// first pipeline a process runs on Beam's local runner (prism) starts its
// job service and sets Beam's global job endpoint and environment flags
// without a lock, so the asynchronous loop starts no second rollout
// before the first has returned; from then on pipelines only read them and
// may run at once.
var rolloutRan atomic.Bool

// loop is one invocation of the training loop: the steps it rolls out and
// learns, and the policy servers it keeps on the right weights.
type loop struct {
	cfg   runconfig.Config
	opts  Options
	task  *demotask.Task
	start time.Time

	emitMu sync.Mutex

	learner *learnSession      // the learner steps, with the training state kept between them
	board   *tensorboard.Board // TensorBoard's event files (nil: run.tensorboard off)

	servers *weightsync.Group // nil: nobody is told (in-process policy, or policy.sync none)
	pushMu  sync.Mutex
	pushed  int64 // the checkpoint the servers were last told to serve; -1 none yet

	// resampled: the loop was entered again at a step being rolled out
	// again (resample.go).
	resampled bool
}

func newLoop(ctx context.Context, cfg runconfig.Config, opts Options, task *demotask.Task, start time.Time) (*loop, error) {
	lp := &loop{cfg: cfg, opts: opts, task: task, start: start, pushed: -1}
	if cfg.InProcessPolicy() || !cfg.Policy.Sync.Pushes() {
		return lp, nil
	}
	g, err := weightsync.Open(ctx, cfg.Policy.Sync.Kind, cfg.SyncEndpoints(),
		weightsync.Options{Timeout: cfg.Policy.Sync.TimeoutOrDefault(), LoadFormat: cfg.Policy.Sync.LoadFormat})
	if err != nil {
		return nil, fmt.Errorf("train: policy.sync: %w", err)
	}
	lp.servers = g
	return lp, nil
}

func (lp *loop) close() {
	if lp.servers != nil {
		lp.servers.Close()
	}
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

// sampler is the checkpoint whose weights sample step k: k itself, or in
// an asynchronous run the one before (checkpoint 0 samples step 0).
func (lp *loop) sampler(k int64) int64 {
	if lp.cfg.Run.Async && k > 0 {
		return k - 1
	}
	return k
}

// serve tells the policy servers to serve checkpoint s before step k is
// rolled out, unless they were told already (pushes only go forward).
// Nothing of step k is written when it fails.
func (lp *loop) serve(ctx context.Context, k, s int64) error {
	if err := lp.recheck(ctx, k); err != nil {
		return fmt.Errorf("train: step %d not started: policy.sync: %w; nothing of step %d was written: fix the server (or policy.sync), then run the same command again to resume", k, err, k)
	}
	if err := lp.push(ctx, s); err != nil {
		return fmt.Errorf("train: step %d not started: policy.sync: %w; nothing of step %d was written: fix the server (or policy.sync), then run the same command again to resume", k, err, k)
	}
	return nil
}

// push makes the servers serve checkpoint s, unless they do already.
func (lp *loop) push(ctx context.Context, s int64) error {
	if lp.servers == nil {
		return nil
	}
	lp.pushMu.Lock()
	defer lp.pushMu.Unlock()
	if lp.pushed >= s {
		return nil
	}
	if err := lp.servers.Push(ctx, weightsync.Checkpoint{Dir: serverCheckpointDir(lp.cfg, s), Version: s}); err != nil {
		return err
	}
	lp.pushed = s
	if lp.opts.Log != nil {
		lp.opts.Log(fmt.Sprintf("policy servers (%s, %d) serve checkpoint %d", lp.servers.Kind(), len(lp.servers.Endpoints()), s))
	}
	return nil
}

// recheck asks the servers that name their version whether they still
// serve the checkpoint they were last told of, before step k is rolled
// out, and pushes it again to all of them when one does not: a server
// restarted since serves its startup weights (vLLM's weight_version
// "default"), and a rollout on it would be refused by the learner.
func (lp *loop) recheck(ctx context.Context, k int64) error {
	if lp.servers == nil {
		return nil
	}
	lp.pushMu.Lock()
	defer lp.pushMu.Unlock()
	v := lp.pushed
	if v < 0 {
		return nil
	}
	stale, err := lp.servers.Stale(ctx, v)
	if err != nil || len(stale) == 0 {
		return err
	}
	if lp.opts.Log != nil {
		lp.opts.Log(fmt.Sprintf("policy.sync: %s (restarted since the push?): pushing checkpoint %d again before step %d is rolled out", strings.Join(stale, "; "), v, k))
	}
	return lp.servers.Push(ctx, weightsync.Checkpoint{Dir: serverCheckpointDir(lp.cfg, v), Version: v})
}

// forget makes the next push of any checkpoint reach the servers, as if
// they had been told of none.
func (lp *loop) forget() {
	lp.pushMu.Lock()
	lp.pushed = -1
	lp.pushMu.Unlock()
}

// serverCheckpointDir is checkpoint k's directory as the policy servers
// see it: under policy.sync.checkpoint_dir, else the run's own, made
// absolute (the servers do not share the working directory).
func serverCheckpointDir(cfg runconfig.Config, k int64) string {
	root := cfg.Policy.Sync.CheckpointDir
	if root == "" {
		root = rundir.Checkpoints(cfg.Run.Dir)
		if !storage.IsRemote(root) {
			if abs, err := filepath.Abs(root); err == nil {
				root = abs
			}
		}
	}
	return rundir.CheckpointIn(root, k)
}

// rollout commits step k, sampled by checkpoint s, unless it is committed.
func (lp *loop) rollout(ctx context.Context, k, s int64) error {
	lp.emit(Event{Step: k, Phase: "rollout"})
	committed, err := storage.Exists(ctx, rundir.Manifest(rundir.Step(lp.cfg.Run.Dir, k)))
	if err != nil || committed {
		return err
	}
	if err := lp.serve(ctx, k, s); err != nil {
		return err
	}
	if lp.cfg.InProcessPolicy() {
		err = withEngine(ctx, lp.cfg, s, "", func(endpoint string) error {
			c := lp.cfg
			c.Policy.Endpoint = endpoint
			defer rolloutRan.Store(true)
			return lp.opts.Rollout(ctx, c, k)
		})
	} else {
		c := lp.cfg
		c.Policy.Endpoint = lp.endpointFor(s)
		if err = reachable(ctx, c, k); err == nil {
			err = lp.opts.Rollout(ctx, c, k)
			rolloutRan.Store(true)
		}
	}
	if err != nil {
		return fmt.Errorf("train: rollout of step %d: %w", k, err)
	}
	return nil
}

// endpointFor is the policy endpoint a rollout on checkpoint s uses: the
// configured one, with policy_version=s when a server pushed names no
// version (a vLLM without /weight_info; the push confirmed it serves s).
// Servers that name their version are left to name it, so that one
// restarted on its startup weights is not taken for checkpoint s.
func (lp *loop) endpointFor(s int64) string {
	e := lp.cfg.Policy.Endpoint
	if lp.servers == nil || lp.servers.NamesVersions() {
		return e
	}
	u, err := url.Parse(e)
	if err != nil {
		return e
	}
	q := u.Query()
	q.Set("policy_version", strconv.FormatInt(s, 10))
	u.RawQuery = q.Encode()
	return u.String()
}

// reachable checks that the policy server answers before step k is rolled
// out, within policy.timeout, so that a server that is down fails the
// step at once, by name, instead of every trajectory.
func reachable(ctx context.Context, cfg runconfig.Config, k int64) error {
	t := cfg.Policy.Timeout
	if t <= 0 {
		t = 10 * time.Minute
	}
	cctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	c, err := policy.Open(cctx, cfg.Policy.Endpoint)
	if err == nil {
		_, err = c.Info(cctx)
		c.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the policy server %s did not answer within policy.timeout %v: %w; start it or fix policy.endpoint, then run the same command again (nothing of step %d was written)",
			secure.RedactURI(cfg.Policy.Endpoint), t, secure.RedactError(err), k)
	}
	return nil
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
	if err := maybeEval(ctx, lp.cfg, lp.task, k+1, lp.emit, lp.start); err != nil {
		return err
	}
	if err := RebuildMetrics(ctx, lp.cfg.Run.Dir); err != nil {
		return err
	}
	lp.board.Sync(ctx)
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
		if err := lp.rollout(ctx, k, k); err != nil {
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
		inflight.Add(1)
		finished := make(chan struct{})
		go func() {
			defer inflight.Done()
			defer close(finished)
			if err := lp.rollout(ctx, j, s); err != nil {
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
	if err := lp.push(ctx, lp.cfg.Run.Steps); err != nil {
		return fmt.Errorf("train: all %d steps are trained, but policy.sync could not give the servers the final checkpoint: %w", lp.cfg.Run.Steps, err)
	}
	return nil
}

// PushForRollout makes the policy servers of cfg (policy.sync) serve the
// newest committed checkpoint up to k before `aipo rollout --step k`
// samples from them (checkpoint k, or k-1 while an asynchronous run has
// not written k yet), as `aipo train` does before its own rollouts, and
// returns that checkpoint and the policy endpoint the rollout uses (with
// policy_version=N for a server that names no version). So a step the
// learner refused because a server was restarted on older weights is
// rolled out again, with --force, from the right weights. Without
// policy.sync, or with an in-process policy, it pushes nothing and
// returns -1 and the configured endpoint; so it does, saying so, when no
// checkpoint up to k is committed (a first rollout before aipo train wrote
// checkpoint 0).
func PushForRollout(ctx context.Context, cfg runconfig.Config, k int64, log func(string)) (int64, string, error) {
	lp, err := newLoop(ctx, cfg, Options{Log: log}, nil, time.Now())
	if err != nil {
		return -1, "", err
	}
	defer lp.close()
	if lp.servers == nil {
		return -1, cfg.Policy.Endpoint, nil
	}
	for s := k; s >= 0 && s >= k-1; s-- {
		ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(cfg.Run.Dir, s))
		if err != nil {
			return -1, "", err
		}
		if !ok {
			continue
		}
		if err := lp.push(ctx, s); err != nil {
			return -1, "", fmt.Errorf("policy.sync: %w; nothing of step %d was written", err, k)
		}
		return s, lp.endpointFor(s), nil
	}
	if log != nil {
		log(fmt.Sprintf("policy.sync: no checkpoint up to %d is committed in %s, so the servers are not told of one and sample with the weights they serve", k, cfg.Run.Dir))
	}
	return -1, lp.cfg.Policy.Endpoint, nil
}
