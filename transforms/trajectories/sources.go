package trajectories

import (
	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// How a step draws its prompts from files, whose rows are read and chosen
// by Select and Refill. A task that generates its prompts registers its
// kind with RegisterGenerator (generated.go).
func init() {
	prompts.RegisterDraw(promptsource.KindFile, drawFiles)
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
