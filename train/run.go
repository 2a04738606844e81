package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/records/tensorboard"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train/rankgroup"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// RolloutFunc runs the rollout of step k with the policy at
// cfg.Policy.Endpoint and commits the step (shards, then manifest).
type RolloutFunc func(ctx context.Context, cfg runconfig.Config, k int64) error

// Options are the parts of a training run that are not configuration.
type Options struct {
	// Rollout runs one step's rollout (the Beam pipeline of
	// pipelines/rollout in production).
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
// (Run, RunDemo, Learn, the rollout pipeline), which only check it;
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

// Event is one progress report.
type Event struct {
	Step, Steps int64
	Phase       string // "rollout", "learn", "eval", "done"
	Learn       *records.Learn
	Eval        *records.Eval
	Benchmarks  *records.BenchmarkEval // eval.benchmarks' scores (evalbench.go)
	Elapsed     time.Duration
}

// Run trains from the last committed checkpoint to cfg.Run.Steps. The run
// directory must hold checkpoint 0 (the initial policy), and ctx its lease
// (Claim): without it Run writes nothing and says so.
func Run(ctx context.Context, cfg runconfig.Config, opts Options) error {
	if opts.Rollout == nil {
		return errors.New("train: no rollout function")
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
	emit := func(e Event) {
		if opts.Progress != nil {
			opts.Progress(e)
		}
	}
	start := time.Now()
	task, err := runTask(cfg)
	if err != nil {
		return err
	}
	// Evaluate the starting point when the schedule asks for it, and
	// rebuild the derived files again: on a resume of a run killed after
	// its last checkpoint committed, this evaluation is the last thing the
	// run does, and the loop below has no step left to rebuild them after.
	if err := maybeEval(ctx, cfg, task, k, emit, start); err != nil {
		return err
	}
	if err := RebuildMetrics(ctx, runDir); err != nil {
		return err
	}
	lp, err := newLoop(ctx, cfg, opts, task, start)
	if err != nil {
		return err
	}
	defer lp.close()
	lp.learner = learner
	// TensorBoard's files catch up with the records first (those of an
	// earlier invocation that it did not write), then follow each step.
	if cfg.Run.WritesTensorBoard() {
		lp.board = tensorboard.Open(cfg.Run.Dir, opts.Log)
	}
	lp.board.Sync(ctx)
	if err := lp.run(ctx, k); err != nil {
		return err
	}
	if _, last, err := checkpoint.Latest(ctx, runDir); err == nil && last >= cfg.Run.Steps {
		if err := checkSignal(ctx, cfg); err != nil {
			return err
		}
		emit(Event{Step: cfg.Run.Steps, Steps: cfg.Run.Steps, Phase: "done", Elapsed: time.Since(start)})
	}
	return nil
}

// withEngine serves checkpoint k in this process for the duration of fn,
// under a name of its own for each purpose ("" for rollouts), on the run's
// learner.backend in its policy.dtype (inproc.ServeCheckpoint).
func withEngine(ctx context.Context, cfg runconfig.Config, k int64, purpose string, fn func(endpoint string) error) error {
	name := fmt.Sprintf("train-%s-%06d", sanitize(cfg.Run.Name), k)
	if purpose != "" {
		name = fmt.Sprintf("train-%s-%s-%06d", sanitize(cfg.Run.Name), purpose, k)
	}
	return inproc.ServeCheckpoint(ctx, rundir.Checkpoint(cfg.Run.Dir, k), name, cfg.Learner.Backend, cfg.Policy.DType, fn)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '?' || r == '#' || r == ':' || r == '@' {
			return '-'
		}
		return r
	}, s)
}

// maybeEval evaluates checkpoint k alone when the schedule says so and it
// has not been done yet.
func maybeEval(ctx context.Context, cfg runconfig.Config, task *demotask.Task, k int64, emit func(Event), start time.Time) error {
	if err := maybeEvalBenchmarks(ctx, cfg, k, emit, start); err != nil {
		return err
	}
	if task == nil || cfg.Eval.Every <= 0 || (k%cfg.Eval.Every != 0 && k != cfg.Run.Steps) {
		return nil
	}
	p := rundir.MetricsRecord(cfg.Run.Dir, rundir.EvalKind, k)
	if ok, err := storage.Exists(ctx, p); err != nil || ok {
		return err
	}
	emit(Event{Step: k, Steps: cfg.Run.Steps, Phase: "eval", Elapsed: time.Since(start)})
	t0 := time.Now()
	var em records.Eval
	err := withEngine(ctx, cfg, k, "eval", func(endpoint string) error {
		c, err := policy.Open(ctx, endpoint)
		if err != nil {
			return err
		}
		defer c.Close()
		ec := demo.DefaultEval()
		ec.Samples, ec.Temperature = cfg.Eval.Samples, cfg.Eval.Temperature
		if cfg.Eval.MaxResponseTokens > 0 {
			ec.MaxTokens = cfg.Eval.MaxResponseTokens
		}
		ec.Seed = int64(cfg.Run.Seed)*7919 + 17
		var splits []demotask.Split
		for _, s := range cfg.Eval.Splits {
			splits = append(splits, demotask.Split(s))
		}
		scores, err := demo.Evaluate(ctx, c, task, ec, splits...)
		if err != nil {
			return err
		}
		em = records.Eval{Kind: "eval", Step: k, PolicyVersion: k, Splits: scores}
		return nil
	})
	if err != nil {
		return fmt.Errorf("train: evaluate checkpoint %d: %w", k, err)
	}
	em.Seconds = time.Since(t0).Seconds()
	if err := writeJSON(ctx, p, em); err != nil {
		return err
	}
	emit(Event{Step: k, Steps: cfg.Run.Steps, Phase: "eval", Eval: &em, Elapsed: time.Since(start)})
	return nil
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
