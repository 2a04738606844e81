package plan

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo/demorun"
	"github.com/aipo-rl/aipo/train"
)

// planChildEnv makes the test binary run one learner step of the run in
// the named directory and exit, printing the plan's learner-step peak and
// the process's measured peak resident memory: peak RSS is a property of
// a whole process, so each size gets one of its own.
const planChildEnv = "AIPO_TRAIN_PLAN_RSS_CHILD"

func TestMain(m *testing.M) {
	runPlanChildIfAsked()
	os.Exit(m.Run())
}

// runPlanChildIfAsked is called by TestMain: in a child it takes the step
// and exits.
func runPlanChildIfAsked() {
	dir := os.Getenv(planChildEnv)
	if dir == "" {
		return
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	cfg, err := runconfig.Load(ctx, filepath.Join(dir, rundir.RunYAMLName))
	if err != nil {
		fail(err)
	}
	p, err := Make(ctx, cfg, Options{PromptTokens: planBenchPrompt})
	if err != nil {
		fail(err)
	}
	// The child is the command that owns the run, as aipo learn is.
	ctx, release, err := train.Claim(ctx, dir, runlease.Options{Command: "aipo learn"}, nil)
	if err != nil {
		fail(err)
	}
	t0 := time.Now()
	_, err = train.Learn(ctx, cfg, 0)
	release() // os.Exit runs no deferred function
	if err != nil {
		fail(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	fmt.Printf("PLAN %d %d %.1f %v\n", p.Phases[phaseLearn].Host(), int64(ru.Maxrss)*1024, time.Since(t0).Seconds(), p.Checkpointing)
	os.Exit(0)
}

// The sequences of the benchmark's step: 4 trajectories of 2,048 tokens,
// micro-batches of 4,096, the reference on (the KL term).
const (
	planBenchPrompt = 64
	planBenchSeq    = 2048
	planBenchTrajs  = 4
	planBenchMicro  = 4096
)

type planBenchSize struct {
	name             string
	hidden, ffn, lay int
	heads, kv, vocab int
}

var planBenchSizes = []planBenchSize{
	{"30M", 384, 1536, 8, 6, 2, 32000},
	{"110M", 768, 2560, 12, 12, 4, 32000},
	{"300M", 1024, 3584, 20, 16, 4, 32000},
}

// planBenchSmoke is the size -short (make bench-smoke) runs instead: every
// path once, at a size where the Go runtime's own memory outweighs the
// plan's, so that the ratio is reported but not judged.
var planBenchSmoke = planBenchSize{"smoke-0.2M", 64, 176, 2, 4, 2, 1024}

func (s planBenchSize) config() model.Config {
	return model.Config{ModelType: "qwen2", HiddenSize: s.hidden, IntermediateSize: s.ffn, NumHiddenLayers: s.lay,
		NumAttentionHeads: s.heads, NumKeyValueHeads: s.kv, VocabSize: s.vocab, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu", TorchDtype: "float32"}
}

// planBenchRun writes a run directory for one learner step of a model of
// size s: checkpoint 0 (random weights) and step 0's trajectories.
func planBenchRun(b *testing.B, s planBenchSize) string {
	b.Helper()
	ctx := context.Background()
	cfg, err := demorun.Config(demorun.Options{Quick: true, RunDir: filepath.Join(b.TempDir(), "run")})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Learner.Loss.KLCoef = 1e-3
	cfg.Learner.MicroBatchTokens = planBenchMicro
	cfg.Policy.MaxResponseTokens = planBenchSeq - planBenchPrompt
	cfg.Data.BatchSize, cfg.Rollout.GroupSize = 1, planBenchTrajs
	m, err := model.New(s.config(), 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := trainer.SaveCheckpoint(ctx, rundir.Checkpoint(cfg.Run.Dir, 0), m, nil, nil, checkpoint.TrainerState{RunID: cfg.Run.Name}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	var trajs []schemas.Trajectory
	for i := range planBenchTrajs {
		t := schemas.Trajectory{SchemaVersion: schemas.SchemaVersion, Run: cfg.Run.Name, PromptID: "p", SampleIndex: int32(i), DataSource: "bench",
			Advantage: float32(i%2)*2 - 1, FinishReason: sampling.FinishStop}
		for range planBenchPrompt {
			t.PromptIDs = append(t.PromptIDs, int32(r.IntN(s.vocab)))
		}
		for range planBenchSeq - planBenchPrompt {
			t.ResponseIDs = append(t.ResponseIDs, int32(r.IntN(s.vocab)))
			t.TokenSource = append(t.TokenSource, schemas.SourcePolicy)
			t.BehaviorLogProbs = append(t.BehaviorLogProbs, -10)
		}
		trajs = append(trajs, t)
	}
	if _, err := schemas.WriteStep(ctx, rundir.Step(cfg.Run.Dir, 0), [][]schemas.Trajectory{trajs}, schemas.Manifest{Run: cfg.Run.Name}); err != nil {
		b.Fatal(err)
	}
	y, err := cfg.YAML()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Run.Dir, rundir.RunYAMLName), y, 0o644); err != nil {
		b.Fatal(err)
	}
	return cfg.Run.Dir
}

// BenchmarkPlanPeakRSS holds the plan's host memory of a learner step to
// the peak resident memory of a process that takes it (aipo learn's path:
// checkpoint 0 loaded, pi_old and the reference scored, the loss's
// forward and backward passes, AdamW, checkpoint 1 written), one child
// process a size, with 2,048-token sequences: "ratio" is measured over
// planned and must lie within 15% of 1. AIPO_PLAN_BENCH_SIZES (a comma
// list of 30M, 110M, 300M) picks sizes; default all three. With -short
// (make bench-smoke) it runs planBenchSmoke alone.
func BenchmarkPlanPeakRSS(b *testing.B) {
	want := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("AIPO_PLAN_BENCH_SIZES"), ",") {
		if n != "" {
			want[n] = true
		}
	}
	sizes := planBenchSizes
	if testing.Short() {
		sizes, want = []planBenchSize{planBenchSmoke}, nil
	}
	for _, s := range sizes {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		b.Run(s.name, func(b *testing.B) {
			dir := planBenchRun(b, s)
			var planned, measured int64
			var secs float64
			var ckpt bool
			for range b.N {
				cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
				cmd.Env = append(os.Environ(), planChildEnv+"="+dir)
				out, err := cmd.Output()
				if err != nil {
					b.Fatalf("learner step of the %s model: %v\n%s", s.name, err, out)
				}
				sc := bufio.NewScanner(strings.NewReader(string(out)))
				found := false
				for sc.Scan() {
					if _, err := fmt.Sscanf(sc.Text(), "PLAN %d %d %g %t", &planned, &measured, &secs, &ckpt); err == nil {
						found = true
					}
				}
				if !found {
					b.Fatalf("the child printed no PLAN line:\n%s", out)
				}
				// The next iteration learns step 0 again from checkpoint 0.
				if err := os.RemoveAll(rundir.Checkpoint(dir, 1)); err != nil {
					b.Fatal(err)
				}
			}
			ratio := float64(measured) / float64(planned)
			P := model.ParamCount(s.config())
			b.ReportMetric(float64(planned)/(1<<20), "planned-MB")
			b.ReportMetric(float64(measured)/(1<<20), "peak-RSS-MB")
			b.ReportMetric(ratio, "ratio")
			b.ReportMetric(float64(measured)/float64(P), "RSS-bytes/param")
			b.ReportMetric(secs, "step-s")
			b.Logf("%s (%d parameters, checkpointing %v): planned %.0f MiB, peak RSS %.0f MiB, ratio %.3f", s.name, P, ckpt, float64(planned)/(1<<20), float64(measured)/(1<<20), ratio)
			if s != planBenchSmoke && math.Abs(ratio-1) > 0.15 {
				b.Errorf("%s: peak RSS %.0f MiB is %.1f%% off the plan's %.0f MiB (bound 15%%)", s.name, float64(measured)/(1<<20), 100*(ratio-1), float64(planned)/(1<<20))
			}
		})
	}
}
