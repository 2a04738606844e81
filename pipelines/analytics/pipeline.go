package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strconv"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	beamrow.Register[stepAcc]()
	beamrow.Register[promptTally]()
	register.Function1x2[schemas.Trajectory, int64, stepAcc](trajectoryByStep)
	register.Function1x2[schemas.Trajectory, string, promptTally](trajectoryByPrompt)
	register.Function2x2[string, promptTally, int64, stepAcc](promptByStep)
	register.Function2x1[stepAcc, stepAcc, stepAcc](merge)
	register.Function2x1[promptTally, promptTally, promptTally](mergeTally)
}

// Options configure one analysis.
type Options struct {
	// Run is the run directory (local or gs://).
	Run string
	// Out is where the report goes; <Run>/analysis when empty.
	Out string
	// Steps selects the steps to analyse.
	Steps StepRange
}

// OutDir is the report directory of o.
func (o Options) OutDir() string {
	if o.Out != "" {
		return o.Out
	}
	return rundir.Analysis(o.Run)
}

func trajectoryByStep(t schemas.Trajectory) (int64, stepAcc) {
	return t.Step, summarize(t)
}

func trajectoryByPrompt(t schemas.Trajectory) (string, promptTally) {
	p := promptTally{Step: t.Step, Samples: 1}
	if t.Correct {
		p.Correct = 1
	}
	return strconv.FormatInt(t.Step, 10) + "\x00" + t.PromptID, p
}

func promptByStep(_ string, p promptTally) (int64, stepAcc) { return p.Step, tallyAcc(p) }

// PerStep aggregates trajectories into one accumulator per step: trajectory
// facts combined per step key, prompt outcomes first combined per (step,
// prompt) key and then per step.
//
// Input: PCollection<schemas.Trajectory>. Output: PCollection<KV<int64,
// stepAcc>>, one element per step that has trajectories.
func PerStep(s beam.Scope, trajs beam.PCollection) beam.PCollection {
	s = s.Scope("analytics.PerStep")
	byStep := beam.ParDo(s, trajectoryByStep, trajs)
	byPrompt := beam.CombinePerKey(s, mergeTally, beam.ParDo(s, trajectoryByPrompt, trajs))
	prompts := beam.ParDo(s, promptByStep, byPrompt)
	return beam.CombinePerKey(s, merge, beam.Flatten(s, byStep, prompts))
}

// Build adds the analysis of plan to the pipeline: read, aggregate per step,
// write the report into out.
func Build(s beam.Scope, plan Plan, out string) { BuildWithHeldout(s, plan, out, nil) }

// BuildWithHeldout is Build with the run's held-out evaluations (see
// records.ReadHeldout) in the report.
func BuildWithHeldout(s beam.Scope, plan Plan, out string, heldout []records.BenchmarkEval) {
	s = s.Scope("analytics")
	trajs, bad := readTrajectories(s, plan.Steps)
	perStep := PerStep(s, trajs)
	writeReport(s, plan, out, heldout, beam.DropKey(s, perStep), bad)
}

// Run discovers the steps of o.Run, logs the skipped ones, and runs the
// analysis on the runner named by Beam's --runner flag (prism by default).
// It returns the plan that was analysed.
func Run(ctx context.Context, o Options) (Plan, error) {
	if o.Run == "" {
		return Plan{}, fmt.Errorf("analyze: --run is required (the run directory, local or gs://)")
	}
	plan, err := Discover(ctx, o.Run, o.Steps)
	for _, sk := range plan.Skipped {
		log.Printf("analyze: skipping step %d (%s): %s", sk.Step, sk.Dir, sk.Reason)
	}
	if err != nil {
		return plan, err
	}
	heldout, err := records.ReadHeldout(ctx, o.Run)
	if err != nil {
		return plan, err
	}
	p, s := beam.NewPipelineWithRoot()
	BuildWithHeldout(s, plan, o.OutDir(), heldout)
	if err := beamrun.Run(ctx, p); err != nil {
		return plan, fmt.Errorf("analyze %s: %w", o.Run, err)
	}
	// Steps whose shards could not be read are known once the pipeline
	// has run: the report lists them, and so does the returned plan.
	b, err := storage.ReadFile(ctx, storage.Join(o.OutDir(), JSONName))
	if errors.Is(err, storage.ErrNotExist) {
		return plan, nil // a runner that writes nothing (Dataflow's --dry_run)
	}
	if err != nil {
		return plan, fmt.Errorf("analyze %s: read the report back: %w", o.Run, err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return plan, fmt.Errorf("analyze %s: read the report back: %w", o.Run, err)
	}
	unreadable := map[int64]bool{}
	for _, u := range rep.Unreadable {
		unreadable[u.Step] = true
	}
	kept := plan.Steps[:0]
	for _, st := range plan.Steps {
		if !unreadable[st.Step] {
			kept = append(kept, st)
		}
	}
	plan.Steps = kept
	for _, sk := range rep.Skipped {
		if unreadable[sk.Step] {
			log.Printf("analyze: skipping step %d (%s): %s", sk.Step, sk.Dir, sk.Reason)
		}
	}
	plan.Skipped = rep.Skipped
	return plan, nil
}
