package parquetio

import (
	"context"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

// init registers the DoFns, element types, emitters and iterators so that
// the transforms run on portable runners (prism, Flink, Dataflow) without
// reflection fallbacks.
func init() {
	beamrow.Register[schemas.Trajectory]()
	beamrow.Register[schemas.Prompt]()
	beamrow.Register[schemas.EvalRecord]()
	beamrow.Register[schemas.ManifestFile]()
	beamrow.Register[Shard]()

	register.DoFn3x1[context.Context, schemas.Trajectory, func(schemas.ManifestFile), error](&writeShardsFn[schemas.Trajectory]{})
	register.DoFn3x1[context.Context, schemas.Prompt, func(schemas.ManifestFile), error](&writeShardsFn[schemas.Prompt]{})
	register.DoFn3x1[context.Context, schemas.EvalRecord, func(schemas.ManifestFile), error](&writeShardsFn[schemas.EvalRecord]{})
	register.Emitter1[schemas.ManifestFile]()

	register.DoFn4x1[context.Context, []byte, func(*schemas.ManifestFile) bool, func(string), error](&commitFn{})
	register.Iter1[schemas.ManifestFile]()
	register.Emitter1[string]()

	register.DoFn3x1[context.Context, string, func(Shard), error](&listShardsFn{})
	register.Emitter1[Shard]()

	register.DoFn3x1[context.Context, Shard, func(schemas.Trajectory), error](&readShardFn[schemas.Trajectory]{})
	register.DoFn3x1[context.Context, Shard, func(schemas.Prompt), error](&readShardFn[schemas.Prompt]{})
	register.DoFn3x1[context.Context, Shard, func(schemas.EvalRecord), error](&readShardFn[schemas.EvalRecord]{})
	register.Emitter1[schemas.Trajectory]()
	register.Emitter1[schemas.Prompt]()
	register.Emitter1[schemas.EvalRecord]()
}
