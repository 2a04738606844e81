package trajectories

import (
	"context"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// init registers the DoFns, element types, emitters and iterators so that
// the transforms run on portable runners without reflection fallbacks.
func init() {
	beamrow.Register[Group]()
	beamrow.Register[Stats]()
	beamrow.Register[schemas.Prompt]()
	beamrow.Register[schemas.Trajectory]()
	beamrow.Register[Decision]()

	register.Function1x2[schemas.Prompt, string, schemas.Prompt](keyByID)
	register.Function1x1[schemas.Prompt, string](idOf)
	register.DoFn3x0[[]byte, func(*string) bool, func(string, int)](&chooseFn{})
	register.Function4x0[string, func(*schemas.Prompt) bool, func(*int) bool, func(int, schemas.Prompt)](joinSlot)
	register.DoFn2x2[int, schemas.Prompt, int, schemas.Prompt](&batchKeyFn{})
	register.DoFn2x2[context.Context, int, int, schemas.Prompt](&slotFn{})
	register.DoFn4x1[context.Context, int, func(*schemas.Prompt) bool, func(Group), error](&sampleFn{})
	register.DoFn1x2[Group, Group, error](&scoreFn{})
	register.DoFn4x1[context.Context, Group, func(schemas.Trajectory), func(Stats), error](&advantageFn{})
	register.DoFn3x1[context.Context, string, func(Group), error](&resumeFn{})
	register.Function2x1[[]byte, func(*Stats) bool, parquetio.StepMeta](mergeStats)
	register.Function1x1[int, parquetio.StepMeta](deadLettersStepMeta)
	register.DoFn3x2[context.Context, []byte, func(*parquetio.StepMeta) bool, parquetio.StepMeta, error](&checkStepFn{})
	register.DoFn3x1[Group, func(schemas.Trajectory), func(Decision), error](&decideFn{})
	register.DoFn4x0[[]byte, func(*string) bool, func(*Decision) bool, func(string, int)](&refillFn{})
	register.DoFn3x1[[]byte, func(*Decision) bool, func(int, schemas.Prompt), error](&refillGeneratedFn{})
	register.DoFn3x0[schemas.Trajectory, func(*Decision) bool, func(schemas.Trajectory)](&trimFn{})
	register.DoFn2x1[[]byte, func(*Decision) bool, parquetio.StepMeta](&decisionMetaFn{})

	register.Iter1[string]()
	register.Iter1[int]()
	register.Iter1[schemas.Prompt]()
	register.Iter1[Stats]()
	register.Iter1[parquetio.StepMeta]()
	register.Iter1[Decision]()
	register.Emitter1[Decision]()
	register.Emitter2[string, int]()
	register.Emitter2[int, schemas.Prompt]()
	register.Emitter1[Group]()
	register.Emitter1[schemas.Trajectory]()
	register.Emitter1[Stats]()
}
