package trajectories

import (
	"fmt"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// How a step draws its prompts from the kinds of prompt source a run's
// data.sources may list (see package promptsource): files, whose rows are
// read and chosen by Select and Refill, and the demo task, whose questions
// are drawn by DemoPrompts and RefillDemo.
func init() {
	prompts.RegisterDraw(promptsource.KindFile, drawFiles)
	prompts.RegisterDraw(promptsource.KindDemo, drawDemo)
}

// drawFiles reads prompt files: every entry's rows (prompts.TryRead, the
// malformed ones dead-lettered) make one dataset, from which Select takes
// the step's batch and Refill the further draws.
func drawFiles(s beam.Scope, ss promptsource.List, st prompts.Step) (prompts.Drawn, error) {
	files := make([]prompts.Source, len(ss))
	for i, src := range ss {
		files[i] = src.Source
	}
	good, dead, err := prompts.TryRead(s, files...)
	if err != nil {
		return prompts.Drawn{}, err
	}
	meta := DeadLettersMeta(s, prompts.WriteDeadLetters(s, st.DeadLetters, dead))
	return prompts.Drawn{
		Slotted:     Select(s, st.Seed, st.Step, st.Batch, good),
		Meta:        []beam.PCollection{meta},
		Files:       ss.Label(),
		DeadLetters: st.DeadLetters,
		Refill: func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection {
			return Refill(s, st.Seed, st.Step, draw, st.Batch, good, earlier)
		},
	}, nil
}

// drawDemo draws questions from the built-in demo task, its one entry's
// task and split: DemoPrompts draws the step's batch and RefillDemo the
// further draws.
func drawDemo(s beam.Scope, ss promptsource.List, st prompts.Step) (prompts.Drawn, error) {
	tc, split := ss[0].DemoTask(), ss[0].DemoSplit()
	task, err := demotask.New(tc)
	if err != nil {
		return prompts.Drawn{}, fmt.Errorf("data.sources[0].task: %w", err)
	}
	return prompts.Drawn{
		Slotted: Slotted(s, DemoPrompts(task, split, st.Batch, st.Seed, st.Step)),
		Refill: func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection {
			return RefillDemo(s, tc, split, st.Seed, st.Step, draw, st.Batch, earlier)
		},
	}, nil
}
