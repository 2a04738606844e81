package prompts

import (
	"fmt"
	"sync"

	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Step is what a draw needs of the step it draws for.
type Step struct {
	// Seed is the run's seed, Step the step's index and Batch the prompts
	// it takes (data.batch_size).
	Seed  uint64
	Step  int64
	Batch int
	// DeadLetters is the file the step's malformed rows go to.
	DeadLetters string
}

// Drawn is the first draw of a step, and how the step draws more.
type Drawn struct {
	// Slotted is the step's prompts keyed by slot 0..Batch-1:
	// PCollection<KV<int, schemas.Prompt>>.
	Slotted beam.PCollection
	// Meta are what the draw adds to the step's manifest:
	// PCollection<parquetio.StepMeta> each (the count of dead letters).
	Meta []beam.PCollection
	// Files names the files the prompts were read from, and DeadLetters
	// where their malformed rows went, for the step's check to name when
	// no prompt was usable; both empty for sources that always give
	// prompts.
	Files, DeadLetters string
	// Refill adds draw draw >= 1 of dynamic sampling, which takes prompts
	// no earlier draw of the step took, given the earlier draws'
	// decisions (PCollection<trajectories.Decision>), keyed by slot as
	// Slotted.
	Refill func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection
}

// A DrawFunc adds the first draw of step st from the sources ss, every
// entry of a run's data.sources (all of one kind, checked), to the
// pipeline.
type DrawFunc func(s beam.Scope, ss promptsource.List, st Step) (Drawn, error)

var (
	drawsMu sync.RWMutex
	draws   = map[string]DrawFunc{}
)

// RegisterDraw makes the sources of a kind of promptsource drawable by
// Draw. It panics if kind is empty or registered twice (programming
// errors).
func RegisterDraw(kind string, draw DrawFunc) {
	drawsMu.Lock()
	defer drawsMu.Unlock()
	if kind == "" || draw == nil {
		panic(fmt.Sprintf("prompts.RegisterDraw(%q): kind and draw must be set", kind))
	}
	if _, dup := draws[kind]; dup {
		panic("prompts: draw of source kind registered twice: " + kind)
	}
	draws[kind] = draw
}

// Draw adds the first draw of a step from the run's sources to the
// pipeline: the draw registered for their kind.
func Draw(s beam.Scope, ss promptsource.List, st Step) (Drawn, error) {
	if _, err := ss.Kind(); err != nil {
		return Drawn{}, err
	}
	kind := ss[0].KindName()
	drawsMu.RLock()
	draw, ok := draws[kind]
	drawsMu.RUnlock()
	if !ok {
		return Drawn{}, fmt.Errorf("data.sources: sources of kind %s have no draw registered (prompts.RegisterDraw; transforms/trajectories registers file and demo)", kind)
	}
	return draw(s, ss, st)
}
