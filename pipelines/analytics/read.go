package analytics

import (
	"context"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	beamrow.Register[stepShard]()
	beamrow.Register[UnreadableShard]()
	register.DoFn4x1[context.Context, stepShard, func(schemas.Trajectory), func(UnreadableShard), error](&readShardFn{})
	register.Emitter1[UnreadableShard]()
}

// UnreadableShard is a committed shard the analysis could not read: missing,
// not matching its manifest entry (size, sha256, rows), or not decodable.
type UnreadableShard struct {
	Step   int64  `json:"step"`
	Shard  string `json:"shard"`
	Reason string `json:"reason"`
}

// stepShard is one shard of a planned step.
type stepShard struct {
	Step  int64
	Shard parquetio.Shard
}

// readTrajectories reads the shards of the planned (committed) steps, each
// verified against its manifest entry (size, sha256, row count) and its
// rows validated, as parquetio's reader does; a shard that fails is not a
// pipeline failure but an UnreadableShard, so that the analysis reports
// every step it could read and names the shards it could not.
//
// Output: PCollection<schemas.Trajectory>, PCollection<UnreadableShard>.
func readTrajectories(s beam.Scope, steps []StepRef) (beam.PCollection, beam.PCollection) {
	s = s.Scope("analytics.ReadTrajectories")
	var shards []stepShard
	for _, st := range steps {
		for _, f := range st.Files {
			shards = append(shards, stepShard{Step: st.Step, Shard: parquetio.Shard{Dir: st.Dir, File: f}})
		}
	}
	if len(shards) == 0 {
		// Committed steps without rows: nothing to read, and Beam needs an
		// element type for the empty collections.
		return beam.CreateList(s, []schemas.Trajectory{}), beam.CreateList(s, []UnreadableShard{})
	}
	return beam.ParDo2(s, &readShardFn{}, beam.Reshuffle(s, beam.CreateList(s, shards)))
}

// readShardFn reads one shard, or reports why it could not.
type readShardFn struct{}

func (fn *readShardFn) ProcessElement(ctx context.Context, sh stepShard, emit func(schemas.Trajectory), bad func(UnreadableShard)) error {
	step := &schemas.Step{Dir: sh.Shard.Dir, Manifest: schemas.Manifest{Kind: schemas.KindOf[schemas.Trajectory](), Files: []schemas.ManifestFile{sh.Shard.File}}}
	rows, err := schemas.ReadShard[schemas.Trajectory](ctx, step, 0)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // cancelled: not the shard's fault
		}
		bad(UnreadableShard{Step: sh.Step, Shard: sh.Shard.String(), Reason: err.Error()})
		return nil
	}
	for i := range rows {
		emit(rows[i])
	}
	return nil
}
