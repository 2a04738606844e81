package parquetio

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Shard is one committed file of a step: the step directory and the file's
// manifest entry (Path relative to Dir).
type Shard struct {
	Dir  string
	File schemas.ManifestFile
}

// String returns the shard's full path.
func (sh Shard) String() string { return storage.Join(sh.Dir, sh.File.Path) }

// ListShards expands committed step directories into the files their
// manifests list. A directory without a manifest, or with a manifest of
// another kind than kind ("trajectories", "prompts", "eval"; empty accepts
// any), fails the pipeline with an error naming the directory.
//
//	PCollection<string> -> PCollection<Shard>
func ListShards(s beam.Scope, kind string, dirs beam.PCollection) beam.PCollection {
	s = s.Scope("parquetio.ListShards")
	return beam.ParDo(s, &listShardsFn{Kind: kind}, dirs)
}

// ReadTrajectories reads the committed steps in dirs (local or gs://).
//
//	() -> PCollection<schemas.Trajectory>
func ReadTrajectories(s beam.Scope, dirs ...string) beam.PCollection {
	s = s.Scope("parquetio.ReadTrajectories")
	return readDirs(s, &readShardFn[schemas.Trajectory]{}, "trajectories", dirs)
}

// ReadPrompts reads the committed prompt sets in dirs (local or gs://).
//
//	() -> PCollection<schemas.Prompt>
func ReadPrompts(s beam.Scope, dirs ...string) beam.PCollection {
	s = s.Scope("parquetio.ReadPrompts")
	return readDirs(s, &readShardFn[schemas.Prompt]{}, "prompts", dirs)
}

// ReadEvalRecords reads the committed eval record sets in dirs (local or
// gs://).
//
//	() -> PCollection<schemas.EvalRecord>
func ReadEvalRecords(s beam.Scope, dirs ...string) beam.PCollection {
	s = s.Scope("parquetio.ReadEvalRecords")
	return readDirs(s, &readShardFn[schemas.EvalRecord]{}, "eval", dirs)
}

// ReadTrajectoryShards reads shards listed by ListShards.
//
//	PCollection<Shard> -> PCollection<schemas.Trajectory>
func ReadTrajectoryShards(s beam.Scope, shards beam.PCollection) beam.PCollection {
	s = s.Scope("parquetio.ReadTrajectoryShards")
	return beam.ParDo(s, &readShardFn[schemas.Trajectory]{}, beam.Reshuffle(s, shards))
}

// ReadPromptShards reads shards listed by ListShards.
//
//	PCollection<Shard> -> PCollection<schemas.Prompt>
func ReadPromptShards(s beam.Scope, shards beam.PCollection) beam.PCollection {
	s = s.Scope("parquetio.ReadPromptShards")
	return beam.ParDo(s, &readShardFn[schemas.Prompt]{}, beam.Reshuffle(s, shards))
}

// ReadEvalRecordShards reads shards listed by ListShards.
//
//	PCollection<Shard> -> PCollection<schemas.EvalRecord>
func ReadEvalRecordShards(s beam.Scope, shards beam.PCollection) beam.PCollection {
	s = s.Scope("parquetio.ReadEvalRecordShards")
	return beam.ParDo(s, &readShardFn[schemas.EvalRecord]{}, beam.Reshuffle(s, shards))
}

// readDirs is the shared body of the Read* sources.
//
//	() -> PCollection<T>
func readDirs(s beam.Scope, fn any, kind string, dirs []string) beam.PCollection {
	if len(dirs) == 0 {
		panic("parquetio: no step directories to read")
	}
	for _, d := range dirs {
		if d == "" {
			panic("parquetio: empty step directory in the list to read")
		}
	}
	shards := ListShards(s, kind, beam.CreateList(s, dirs))
	return beam.ParDo(s, fn, beam.Reshuffle(s, shards))
}

// listShardsFn reads a step's manifest and emits its files.
type listShardsFn struct {
	// Kind is the manifest kind the step must have; empty accepts any.
	Kind string `json:"kind"`
}

// ProcessElement emits the shards of one step directory.
func (fn *listShardsFn) ProcessElement(ctx context.Context, dir string, emit func(Shard)) error {
	m, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		return fmt.Errorf("parquetio: %w", err) // names dir
	}
	if fn.Kind != "" && m.Kind != fn.Kind {
		return fmt.Errorf("parquetio: step %s holds %s, not %s (read it with the matching Read function)", dir, m.Kind, fn.Kind)
	}
	for _, f := range m.Files {
		emit(Shard{Dir: dir, File: f})
	}
	return nil
}

// readShardFn verifies one shard against its manifest entry and emits its
// rows, decoded in bulk.
type readShardFn[T schemas.Row] struct{}

// ProcessElement reads one shard: size and sha256 are checked against the
// manifest entry, the rows are decoded in bulk (schemas.ReadShardBytes), their
// count is checked, and trajectories are validated.
func (fn *readShardFn[T]) ProcessElement(ctx context.Context, sh Shard, emit func(T)) error {
	step := &schemas.Step{Dir: sh.Dir, Manifest: schemas.Manifest{Kind: schemas.KindOf[T](), Files: []schemas.ManifestFile{sh.File}}}
	rows, err := schemas.ReadShard[T](ctx, step, 0)
	if err != nil {
		return fmt.Errorf("parquetio: %w", err)
	}
	for i := range rows {
		emit(rows[i])
	}
	return nil
}
