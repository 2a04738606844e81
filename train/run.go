package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train/rankgroup"
)

// RolloutFunc runs the rollout of step k with the policy at
// cfg.Policy.Endpoint and commits the step (shards, then manifest).
type RolloutFunc func(ctx context.Context, cfg runconfig.Config, k int64) error

// Options are the parts of a training run that are not configuration.
type Options struct {
	// Rollout runs one step's rollout (the Beam pipeline of
	// pipelines/rollout in production: rollout.RunStep).
	Rollout RolloutFunc
	// Progress receives every phase change; nil discards them.
	Progress func(Event)
	// StopAfter, when positive, ends the run after that many steps (for
	// tests of resumption); 0 runs to cfg.Run.Steps.
	StopAfter int64
	// Log receives one-line notices of the run; nil drops them.
	Log func(string)
	// Ranks, when set, is the group of learner processes this one leads
	// (rank 0): each learner step is taken by all of them (Follow).
	Ranks *rankgroup.Ranks
	// Evaluate, when set, evaluates checkpoint k as the run's eval section
	// asks, unless that was done (train/evaluate's Evaluator.Evaluate): the
	// loop calls it for the checkpoint it starts from and for each one it
	// commits, before metrics.jsonl is rebuilt, and gives it the loop's
	// progress reports to send its own to (Steps and Elapsed filled in).
	Evaluate func(ctx context.Context, cfg runconfig.Config, k int64, emit func(Event)) error
	// Servers reach the policy servers the rollouts sample from when the
	// policy is not in this process (train/policyservers' Servers); such
	// a run needs them.
	Servers Servers
	// Board, when set and run.tensorboard is on, follows the run's metrics
	// records (records/tensorboard's Board): it catches up with them
	// before the first step and after each rebuild of metrics.jsonl.
	Board Follower
}

// Servers are the policy servers of a run whose policy is not in this
// process (policy.endpoint), kept on the checkpoint each step samples
// (policy.sync).
type Servers interface {
	// Serve makes the servers serve checkpoint s before step k is rolled
	// out, unless they do already; its error says that nothing of step k
	// was written.
	Serve(ctx context.Context, k, s int64) error
	// Endpoint is the policy endpoint the rollout of step k on checkpoint
	// s uses, once the server there answered.
	Endpoint(ctx context.Context, k, s int64) (string, error)
	// Forget makes the next Serve push its checkpoint, as if the servers
	// had been told of none (a step rolled out again).
	Forget()
	// Finish makes the servers serve the run's final checkpoint.
	Finish(ctx context.Context) error
}

// A Follower keeps something up to date with the run's metrics records.
// A failure is its own to report: the run goes on.
type Follower interface {
	Sync(ctx context.Context)
}

// Claim takes the lease of runDir (internal/runlease) for the command that
// owns the run, once per process, before anything is written there, and
// removes what dead attempts left in the directory: temporary files and
// directories of writers that are gone. Everything under checkpoints/ and
// step-*/ is written only under the lease, so there any temporary not of
// this process is a dead attempt's; elsewhere (metrics/, report/, ...,
// which eval and analytics may also write) only those of exited local
// processes, or older than the lease timeout, are. o tunes the lease (its
// timeout, --take-over, the command named in it); logf receives one line
// when a stale lease is taken over (unless o.Log is set) or leftovers are
// removed. The returned context carries the lease to the layers below
// (Run, demo.Run, Learn, the rollout pipeline), which only check it;
// release it when the command ends.
func Claim(ctx context.Context, runDir string, o runlease.Options, logf func(string)) (context.Context, func() error, error) {
	if runlease.Held(ctx, runDir) {
		return nil, nil, fmt.Errorf("run directory %s: this process holds its lease already; the command that owns the run claims it once", runDir)
	}
	if o.Log == nil {
		o.Log = logf
	}
	l, ctx, err := runlease.Acquire(ctx, runDir, o)
	if err != nil {
		return nil, nil, err
	}
	release := l.Release
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = runlease.DefaultTimeout
	}
	removed, err := storage.SweepTemps(ctx, runDir, timeout, rundir.CheckpointsName, rundir.StepGlob)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("run directory %s: remove leftovers of dead attempts: %w", runDir, err)
	}
	if len(removed) > 0 && logf != nil {
		logf(fmt.Sprintf("run directory %s: removed %d leftover temporary file(s) of dead attempts", runDir, len(removed)))
	}
	return ctx, release, nil
}

// Event is one progress report (records.Progress, so that an evaluator
// reports without importing the loop).
type Event = records.Progress

// Run trains from the last committed checkpoint to cfg.Run.Steps. The run
// directory must hold checkpoint 0 (the initial policy), and ctx its lease
// (Claim): without it Run writes nothing and says so.
func Run(ctx context.Context, cfg runconfig.Config, opts Options) error {
	if opts.Rollout == nil {
		return errors.New("train: no rollout function")
	}
	if !cfg.InProcessPolicy() && opts.Servers == nil {
		return errors.New("train: the policy is not in this process (policy.endpoint), and no policy servers were given to reach it")
	}
	runDir := cfg.Run.Dir
	if err := runlease.Require(ctx, runDir); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	_, k, err := checkpoint.Latest(ctx, runDir)
	if err != nil {
		return fmt.Errorf("train: %s has no initial policy (checkpoints/step-000000): %w", runDir, err)
	}
	// Derived files are rebuilt whatever step the run starts at: a run
	// killed between its last commit and the rebuild left them short.
	if err := RebuildMetrics(ctx, runDir); err != nil {
		return err
	}
	// So are the checkpoints the policy keeps (a run killed between a
	// commit and the removals after it).
	if err := applyRetention(ctx, cfg); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	learner := newLearnSession(cfg, opts.Log)
	learner.ranks = opts.Ranks
	defer learner.Close()
	start := time.Now()
	lp := newLoop(cfg, opts, start)
	// Evaluate the starting point when the schedule asks for it, and
	// rebuild the derived files again: on a resume of a run killed after
	// its last checkpoint committed, this evaluation is the last thing the
	// run does, and the loop below has no step left to rebuild them after.
	if err := lp.evaluate(ctx, k); err != nil {
		return err
	}
	if err := RebuildMetrics(ctx, runDir); err != nil {
		return err
	}
	lp.learner = learner
	// TensorBoard's files catch up with the records first (those of an
	// earlier invocation that it did not write), then follow each step.
	if cfg.Run.WritesTensorBoard() {
		lp.board = opts.Board
	}
	lp.follow(ctx)
	if err := lp.run(ctx, k); err != nil {
		return err
	}
	if _, last, err := checkpoint.Latest(ctx, runDir); err == nil && last >= cfg.Run.Steps {
		if err := checkSignal(ctx, cfg); err != nil {
			return err
		}
		lp.emit(Event{Step: cfg.Run.Steps, Phase: "done"})
	}
	return nil
}

// withEngine serves checkpoint k in this process for the duration of fn,
// under a name of its own for each purpose ("" for rollouts;
// inproc.RunEngineName), on the run's learner.backend in its policy.dtype.
func withEngine(ctx context.Context, cfg runconfig.Config, k int64, purpose string, fn func(endpoint string) error) error {
	name := inproc.RunEngineName(cfg.Run.Name, purpose, k)
	return inproc.ServeCheckpoint(ctx, rundir.Checkpoint(cfg.Run.Dir, k), name, cfg.Learner.Backend, cfg.Policy.DType, fn)
}

// RebuildMetrics rewrites <run>/metrics.jsonl from the per-step records,
// in step order (learn before eval of the same step), atomically.
func RebuildMetrics(ctx context.Context, runDir string) error {
	files, err := storage.List(ctx, rundir.MetricsRecords(runDir, ""))
	if err != nil {
		return err
	}
	type rec struct {
		step int64
		kind string
		line []byte
	}
	var recs []rec
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			return err
		}
		var head struct {
			Kind string `json:"kind"`
			Step int64  `json:"step"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return fmt.Errorf("train: metrics file %s: %w", f, err)
		}
		recs = append(recs, rec{head.Step, head.Kind, []byte(strings.TrimSpace(string(b)))})
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].step != recs[j].step {
			return recs[i].step < recs[j].step
		}
		return recs[i].kind > recs[j].kind // learn before eval
	})
	var out []byte
	for _, r := range recs {
		out = append(out, r.line...)
		out = append(out, '\n')
	}
	return storage.WriteAtomic(ctx, rundir.MetricsLog(runDir), out)
}
