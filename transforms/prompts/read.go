package prompts

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// Source is one prompt file and its field mapping (see promptfile.Source).
type Source = promptfile.Source

// DeadLetter is a row that could not become a Prompt (see
// promptfile.DeadLetter).
type DeadLetter = promptfile.DeadLetter

func init() {
	beamrow.Register[schemas.Prompt]()
	beamrow.Register[DeadLetter]()
	register.DoFn4x1[context.Context, int, func(schemas.Prompt), func(DeadLetter), error](&readFn{})
	register.Emitter1[schemas.Prompt]()
	register.Emitter1[DeadLetter]()
}

// Read reads the prompt files. Each file is read whole by one worker, in
// parallel across files.
//
// Output: good is PCollection<schemas.Prompt>, dead is
// PCollection<DeadLetter>. It panics if a source is invalid (no path, an
// unknown preset, no data_source); TryRead returns the error instead.
func Read(s beam.Scope, sources ...Source) (good, dead beam.PCollection) {
	good, dead, err := TryRead(s, sources...)
	if err != nil {
		panic(err)
	}
	return good, dead
}

// TryRead is Read returning construction errors.
func TryRead(s beam.Scope, sources ...Source) (good, dead beam.PCollection, err error) {
	s = s.Scope("prompts.Read")
	if len(sources) == 0 {
		return beam.PCollection{}, beam.PCollection{}, fmt.Errorf("prompts.Read: no prompt files given")
	}
	resolved := make([]Source, len(sources))
	idx := make([]int, len(sources))
	for i, src := range sources {
		r, err := src.Resolve()
		if err != nil {
			return beam.PCollection{}, beam.PCollection{}, err
		}
		resolved[i] = r
		idx[i] = i
	}
	good, dead = beam.ParDo2(s, &readFn{Sources: resolved}, beam.CreateList(s, idx))
	return good, dead, nil
}

// readFn reads the i-th source of its list.
type readFn struct {
	Sources []Source `json:"sources"`

	good, deadCount beam.Counter
}

func (f *readFn) Setup() {
	f.good = beam.NewCounter("aipo.prompts", "good")
	f.deadCount = beam.NewCounter("aipo.prompts", "dead")
}

func (f *readFn) ProcessElement(ctx context.Context, i int, emit func(schemas.Prompt), dead func(DeadLetter)) error {
	if i < 0 || i >= len(f.Sources) {
		return fmt.Errorf("prompts.Read: source index %d out of range (%d sources)", i, len(f.Sources))
	}
	src := f.Sources[i]
	st, err := promptfile.Read(ctx, src,
		func(p schemas.Prompt) error { emit(p); return nil },
		func(d DeadLetter) error { dead(d); return nil })
	f.good.Inc(ctx, st.Good)
	f.deadCount.Inc(ctx, st.Dead)
	if err != nil {
		return err
	}
	if st.Dead > 0 || st.Incomplete != "" {
		log.Warnf(ctx, "prompts: %s: %d good rows, %d dead-lettered %s", src.Path, st.Good, st.Dead, st.Incomplete)
	} else {
		log.Infof(ctx, "prompts: %s: %d good rows", src.Path, st.Good)
	}
	return nil
}
