package trajectories

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"gopkg.in/yaml.v3"
)

// A Generator draws the prompts of a task that generates them (the demo's
// questions, Countdown's puzzles) rather than reading them from files.
type Generator interface {
	// Sample draws n prompts with replacement from rng. A prompt's ID
	// names the problem (the step's draw prefixes it with its slot);
	// DataSource names the task's verifier.
	Sample(n int, rng *rand.Rand) []schemas.Prompt
}

// A GeneratorFunc builds the generator of a run's sources, every entry of
// its data.sources (of the kind it was registered for, checked by the
// kind's Check).
type GeneratorFunc func(ss promptsource.List) (Generator, error)

var (
	generatorsMu sync.RWMutex
	generators   = map[string]GeneratorFunc{}
)

// RegisterGenerator makes the sources of a task's kind of promptsource
// drawable (prompts.RegisterDraw): a step's batch is Generated's draw from
// the run seed and the step, dynamic sampling's further draws
// RefillGenerated's. It panics if kind is empty or registered twice
// (programming errors).
func RegisterGenerator(kind string, g GeneratorFunc) {
	if kind == "" || g == nil {
		panic(fmt.Sprintf("trajectories.RegisterGenerator(%q): kind and generator must be set", kind))
	}
	generatorsMu.Lock()
	if _, dup := generators[kind]; dup {
		generatorsMu.Unlock()
		panic("trajectories: generator registered twice: " + kind)
	}
	generators[kind] = g
	generatorsMu.Unlock()
	prompts.RegisterDraw(kind, func(s beam.Scope, ss promptsource.List, st prompts.Step) (prompts.Drawn, error) {
		gen, err := g(ss)
		if err != nil {
			return prompts.Drawn{}, fmt.Errorf("data.sources[0]: %w", err)
		}
		enc, err := yaml.Marshal(ss)
		if err != nil {
			return prompts.Drawn{}, fmt.Errorf("data.sources: %w", err)
		}
		return prompts.Drawn{
			Slotted: Slotted(s, Generated(gen, st.Batch, st.Seed, st.Step)),
			Refill: func(s beam.Scope, draw int, earlier beam.PCollection) beam.PCollection {
				return RefillGenerated(s, kind, string(enc), st.Seed, st.Step, draw, st.Batch, earlier)
			},
		}, nil
	})
}

// generator builds the generator registered for kind from the sources
// encoded as YAML (as a run configuration writes them).
func generator(kind, sources string) (Generator, error) {
	generatorsMu.RLock()
	g, ok := generators[kind]
	generatorsMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("sources of kind %s have no generator in this program: link the task's package (a blank import in the main package)", kind)
	}
	var ss promptsource.List
	if err := yaml.Unmarshal([]byte(sources), &ss); err != nil {
		return nil, fmt.Errorf("sources of kind %s: %w", kind, err)
	}
	return g(ss)
}

// genSalt separates the draws of generated prompts from those of other
// streams of the run seed ("demo", the first task that generated them).
const genSalt = 0x64656d6f

// Generated draws the n prompts of step from gen, from the run seed and
// the step. Prompt ids are "NNN-<problem id>" (the slot and the problem),
// unique within the step.
func Generated(gen Generator, n int, seed uint64, step int64) []schemas.Prompt {
	rng := rand.New(rand.NewPCG(seed^genSalt, uint64(step)))
	ps := gen.Sample(n, rng)
	for i := range ps {
		ps[i].ID = fmt.Sprintf("%03d-%s", i, ps[i].ID)
	}
	return ps
}

// RefillGenerated is Refill for a task's generated prompts: RefillCount
// fresh prompts from the generator of kind for sources (the run's
// data.sources as YAML), drawn with replacement from the run seed, the
// step and the draw, with ids "rDD.SSS-<problem id>" (draw, slot; unique
// within the step).
//
//	PCollection<Decision> -> PCollection<KV<int, schemas.Prompt>>
func RefillGenerated(s beam.Scope, kind, sources string, seed uint64, step int64, draw, batch int, earlier beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.RefillGenerated")
	return beam.ParDo(s, &refillGeneratedFn{Kind: kind, Sources: sources, Seed: seed, Step: step, Draw: draw, Batch: batch},
		beam.Impulse(s), beam.SideInput{Input: earlier})
}

type refillGeneratedFn struct {
	Kind    string `json:"kind"`
	Sources string `json:"sources"`
	Seed    uint64 `json:"seed"`
	Step    int64  `json:"step"`
	Draw    int    `json:"draw"`
	Batch   int    `json:"batch"`

	once sync.Once
	gen  Generator
	err  error
}

func (f *refillGeneratedFn) ProcessElement(_ []byte, earlier func(*Decision) bool, emit func(int, schemas.Prompt)) error {
	f.once.Do(func() { f.gen, f.err = generator(f.Kind, f.Sources) })
	if f.err != nil {
		return fmt.Errorf("rollout: %w", f.err)
	}
	drawn, kept := 0, 0
	var d Decision
	for earlier(&d) {
		drawn++
		if d.Kept {
			kept++
		}
	}
	n := RefillCount(f.Batch, kept, drawn)
	rng := rand.New(rand.NewPCG(f.Seed^genSalt^refillSalt, uint64(f.Step)<<8|uint64(f.Draw)))
	for i, p := range f.gen.Sample(n, rng) {
		p.ID = fmt.Sprintf("r%02d.%03d-%s", f.Draw, i, p.ID)
		emit(i, p)
	}
	return nil
}
