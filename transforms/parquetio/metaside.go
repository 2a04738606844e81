package parquetio

import (
	"context"
	"errors"
	"fmt"

	"github.com/aipo-rl/aipo/internal/beamrow"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	beamrow.Register[StepMeta]()
	register.DoFn5x1[context.Context, []byte, func(*schemas.ManifestFile) bool, func(*StepMeta) bool, func(string), error](&commitMetaFn{})
	register.Iter1[StepMeta]()
}

// WriteTrajectoriesMeta is WriteTrajectories for steps whose manifest facts
// are known only once the rows exist (metrics computed from them, the
// policy version that produced them): every element of metas is merged
// into meta before the manifest is committed. Keys of metas' Meta maps
// override meta's; the manifest's policy version is the largest among meta
// and metas. Run and Step come from meta.
//
//	PCollection<schemas.Trajectory>, PCollection<StepMeta> -> PCollection<string> (the manifest's path, one element)
func WriteTrajectoriesMeta(s beam.Scope, dir string, meta StepMeta, metas, rows beam.PCollection, opts ...WriteOption) beam.PCollection {
	s = s.Scope("parquetio.WriteTrajectoriesMeta")
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
	fn := &writeShardsFn[schemas.Trajectory]{}
	fn.configure(dir, cfg.maxShardRows)
	files := beam.ParDo(s.Scope("WriteShards"), fn, rows)
	commit := &commitMetaFn{Dir: dir, Kind: "trajectories", Meta: meta, KeepOrphans: cfg.keepOrphans, Lease: cfg.lease, RequireMeta: cfg.requireMeta}
	return beam.ParDo(s.Scope("CommitManifest"), commit, beam.Impulse(s),
		beam.SideInput{Input: files}, beam.SideInput{Input: metas})
}

// commitMetaFn is commitFn with a second side input of StepMeta merged into
// Meta.
type commitMetaFn struct {
	Dir         string         `json:"dir"`
	Kind        string         `json:"kind"`
	Meta        StepMeta       `json:"meta"`
	KeepOrphans bool           `json:"keep_orphans"`
	Lease       runlease.Token `json:"lease"`
	RequireMeta string         `json:"require_meta,omitempty"`
}

// ProcessElement merges the side metas and commits the manifest.
func (fn *commitMetaFn) ProcessElement(ctx context.Context, _ []byte, files func(*schemas.ManifestFile) bool, metas func(*StepMeta) bool, emit func(string)) error {
	merged := fn.Meta
	merged.Meta = map[string]string{}
	for k, v := range fn.Meta.Meta {
		merged.Meta[k] = v
	}
	var m StepMeta
	for metas(&m) {
		for k, v := range m.Meta {
			merged.Meta[k] = v
		}
		merged.PolicyVersion = max(merged.PolicyVersion, m.PolicyVersion)
	}
	if fn.RequireMeta != "" {
		v, ok := merged.Meta[fn.RequireMeta]
		switch {
		case !ok:
			return fmt.Errorf("parquetio: step %d of %s not committed: its meta lacks %s, set by the check that must pass before the commit (it failed, or did not run)", fn.Meta.Step, fn.Dir, fn.RequireMeta)
		case v != "passed":
			return errors.New(v) // the check's refusal, as it wrote it
		}
	}
	inner := &commitFn{Dir: fn.Dir, Kind: fn.Kind, Meta: merged, KeepOrphans: fn.KeepOrphans, Lease: fn.Lease}
	return inner.ProcessElement(ctx, nil, files, emit)
}
