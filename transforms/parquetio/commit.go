package parquetio

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// commitFn runs once (its main input is an impulse) with every shard's
// ManifestFile as a side input, and commits Dir/_MANIFEST.json.
type commitFn struct {
	Dir         string   `json:"dir"`
	Kind        string   `json:"kind"`
	Meta        StepMeta `json:"meta"`
	KeepOrphans bool     `json:"keep_orphans"`
	// Lease, when set, must still be held by its attempt when the
	// manifest is written (see internal/runlease).
	Lease runlease.Token `json:"lease"`
}

// ProcessElement commits the manifest and emits its path.
func (fn *commitFn) ProcessElement(ctx context.Context, _ []byte, files func(*schemas.ManifestFile) bool, emit func(string)) error {
	var all []schemas.ManifestFile
	var f schemas.ManifestFile
	for files(&f) {
		all = append(all, f)
	}
	// A writer that lost the run's lease commits nothing and deletes
	// nothing: the run belongs to another writer now.
	if err := runlease.Check(ctx, fn.Lease); err != nil {
		return fmt.Errorf("parquetio: commit %s: %w", fn.Dir, err)
	}
	all, err := separateDuplicates(ctx, fn.Dir, all)
	if err != nil {
		return err
	}
	m := schemas.Manifest{
		Kind:          fn.Kind,
		Run:           fn.Meta.Run,
		Step:          fn.Meta.Step,
		PolicyVersion: fn.Meta.PolicyVersion,
		Files:         all,
		Meta:          fn.Meta.Meta,
	}
	if err := schemas.CommitManifest(ctx, fn.Dir, m); err != nil {
		return fmt.Errorf("parquetio: commit %s: %w", fn.Dir, err)
	}
	path := rundir.Manifest(fn.Dir)
	if !fn.KeepOrphans {
		if err := deleteOrphans(ctx, fn.Dir, all); err != nil {
			// The step is committed; leftover files cost space, not correctness.
			log.Warnf(ctx, "parquetio: %s committed, but removing files it does not list failed: %v", path, err)
		}
	}
	emit(path)
	return nil
}

// separateDuplicates gives every repeated entry (two bundles whose rows were
// identical, hence the same content name) its own copy of the file, named
// part-<hash>-<n>.parquet, so that the manifest lists each shard once and
// no row is lost. The result is sorted by path.
func separateDuplicates(ctx context.Context, dir string, files []schemas.ManifestFile) ([]schemas.ManifestFile, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	out := files[:0:0]
	for i := 0; i < len(files); {
		j := i + 1
		for j < len(files) && files[j].Path == files[i].Path {
			j++
		}
		f := files[i]
		out = append(out, f)
		if j-i > 1 {
			for _, g := range files[i+1 : j] {
				if g.SHA256 != f.SHA256 || g.Bytes != f.Bytes || g.Rows != f.Rows {
					return nil, fmt.Errorf("parquetio: two shards named %s in %s differ (sha256 %s and %s); the shard name no longer follows its content", f.Path, dir, f.SHA256, g.SHA256)
				}
			}
			b, err := schemas.VerifyFile(ctx, dir, f)
			if err != nil {
				return nil, fmt.Errorf("parquetio: copy repeated shard: %w", err)
			}
			for n := 1; n < j-i; n++ {
				c := f
				c.Path = strings.TrimSuffix(f.Path, ".parquet") + fmt.Sprintf("-%d.parquet", n)
				if err := storage.WriteAtomic(ctx, storage.Join(dir, c.Path), b); err != nil {
					return nil, fmt.Errorf("parquetio: copy repeated shard %s: %w", f.Path, err)
				}
				out = append(out, c)
			}
		}
		i = j
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// deleteOrphans removes the files in dir/shards/ that the manifest does not
// list: temporaries and shards of bundle attempts the runner discarded. It
// runs only after this attempt's own manifest was committed, under the
// run's lease when one is given: an unlisted file can then belong to no
// committed step (a manifest is never replaced), only to an attempt whose
// commit can no longer succeed.
func deleteOrphans(ctx context.Context, dir string, files []schemas.ManifestFile) error {
	keep := make(map[string]bool, len(files))
	for _, f := range files {
		keep[storage.Base(f.Path)] = true
	}
	found, err := storage.List(ctx, storage.Join(dir, rundir.ShardsName, "*"))
	if err != nil {
		return err
	}
	for _, p := range found {
		if keep[storage.Base(p)] {
			continue
		}
		if err := storage.Remove(ctx, p); err != nil {
			return err
		}
		log.Infof(ctx, "parquetio: removed %s (not in the manifest)", p)
	}
	return nil
}
