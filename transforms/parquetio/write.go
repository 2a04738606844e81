package parquetio

import (
	"fmt"

	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// StepMeta is what the manifest records about the step besides its files.
type StepMeta struct {
	Run           string            `json:"run"`
	Step          int64             `json:"step"`
	PolicyVersion int64             `json:"policy_version"`
	Meta          map[string]string `json:"meta,omitempty"`
}

// DefaultMaxShardRows bounds one shard: a bundle with more rows is split into
// several shards of at most this many rows (4 Parquet row groups; about
// 100 MB of raw rows for trajectories of 2,000 tokens, which a reader holds
// in memory while it decodes the shard).
const DefaultMaxShardRows = 4 * schemas.RowGroupRows

// writeConfig holds the options of a sink.
type writeConfig struct {
	maxShardRows int
	keepOrphans  bool
	lease        runlease.Token
	requireMeta  string
}

// WriteOption changes how a sink writes.
type WriteOption func(*writeConfig)

// MaxShardRows caps the rows per shard (default DefaultMaxShardRows); a
// bundle with more rows becomes several shards.
func MaxShardRows(n int) WriteOption {
	return func(c *writeConfig) { c.maxShardRows = n }
}

// KeepOrphans leaves files in shards/ that the manifest does not list (by
// default the commit step deletes them).
func KeepOrphans() WriteOption {
	return func(c *writeConfig) { c.keepOrphans = true }
}

// Lease makes the commit step check, just before it writes the manifest,
// that the run's lease still names the attempt of t (see
// internal/runlease); a lost lease fails the commit and deletes nothing.
// A zero token checks nothing.
func Lease(t runlease.Token) WriteOption {
	return func(c *writeConfig) { c.lease = t }
}

// RequireMeta makes WriteTrajectoriesMeta's commit refuse, writing no
// manifest, unless the merged side meta holds key with the value "passed":
// a stage that checks the step before its commit sets key to "passed" or to
// its refusal, which the commit then fails with (the one error of the run),
// and a missing key (the check did not run) refuses too.
func RequireMeta(key string) WriteOption {
	return func(c *writeConfig) { c.requireMeta = key }
}

// WriteTrajectories writes a committed step of trajectories to dir (local or
// gs://): shards first, _MANIFEST.json last.
//
//	PCollection<schemas.Trajectory> -> PCollection<string> (the manifest's path, one element)
func WriteTrajectories(s beam.Scope, dir string, meta StepMeta, rows beam.PCollection, opts ...WriteOption) beam.PCollection {
	s = s.Scope("parquetio.WriteTrajectories")
	return writeStep(s, &writeShardsFn[schemas.Trajectory]{}, "trajectories", dir, meta, rows, opts)
}

// WritePrompts writes a committed set of prompts to dir (local or gs://).
//
//	PCollection<schemas.Prompt> -> PCollection<string> (the manifest's path, one element)
func WritePrompts(s beam.Scope, dir string, meta StepMeta, rows beam.PCollection, opts ...WriteOption) beam.PCollection {
	s = s.Scope("parquetio.WritePrompts")
	return writeStep(s, &writeShardsFn[schemas.Prompt]{}, "prompts", dir, meta, rows, opts)
}

// WriteEvalRecords writes a committed set of eval records to dir (local or
// gs://).
//
//	PCollection<schemas.EvalRecord> -> PCollection<string> (the manifest's path, one element)
func WriteEvalRecords(s beam.Scope, dir string, meta StepMeta, rows beam.PCollection, opts ...WriteOption) beam.PCollection {
	s = s.Scope("parquetio.WriteEvalRecords")
	return writeStep(s, &writeShardsFn[schemas.EvalRecord]{}, "eval", dir, meta, rows, opts)
}

// shardSink is the part of writeShardsFn[T] that writeStep configures.
type shardSink interface {
	configure(dir string, maxShardRows int)
}

// writeStep is the shared body of the sinks: fn writes the shards of one
// row type, kind is its manifest kind.
//
//	PCollection<T> -> PCollection<string>
func writeStep(s beam.Scope, fn shardSink, kind, dir string, meta StepMeta, rows beam.PCollection, opts []WriteOption) beam.PCollection {
	if dir == "" {
		panic("parquetio: empty step directory (pass the step's path, e.g. rundir.Step(run, k))")
	}
	cfg := writeConfig{maxShardRows: DefaultMaxShardRows}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxShardRows < 1 {
		panic(fmt.Sprintf("parquetio: MaxShardRows(%d) must be at least 1", cfg.maxShardRows))
	}
	fn.configure(dir, cfg.maxShardRows)
	files := beam.ParDo(s.Scope("WriteShards"), fn, rows)
	commit := &commitFn{
		Dir:         dir,
		Kind:        kind,
		Meta:        meta,
		KeepOrphans: cfg.keepOrphans,
		Lease:       cfg.lease,
	}
	return beam.ParDo(s.Scope("CommitManifest"), commit, beam.Impulse(s), beam.SideInput{Input: files})
}
