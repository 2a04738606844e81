package schemas

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/parquet-go/parquet-go"
)

// ShardName is the conventional name of shard i of a step:
// part-00007.parquet. Writers that name shards otherwise (for instance after
// a bundle) keep the part-*.parquet pattern.
func ShardName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// WriteStep writes one shard per element of shards under dir/shards/ and then
// commits dir/_MANIFEST.json listing them. The manifest's kind, totals and
// files are filled in; Run, Step, PolicyVersion and Meta are taken from m.
// On error no manifest is written, so readers refuse the directory.
func WriteStep[T Row](ctx context.Context, dir string, shards [][]T, m Manifest) (Manifest, error) {
	m.Kind = KindOf[T]()
	m.Files = make([]ManifestFile, 0, len(shards))
	for i, rows := range shards {
		name := ShardName(i)
		f, err := WriteShard(ctx, storage.Join(dir, rundir.ShardsName, name), rows)
		if err != nil {
			return Manifest{}, err
		}
		f.Path = rundir.ShardsName + "/" + name
		m.Files = append(m.Files, f)
	}
	if err := CommitManifest(ctx, dir, m); err != nil {
		return Manifest{}, fmt.Errorf("commit %s: %w", dir, err)
	}
	return ReadManifest(ctx, dir)
}

// Step is a committed step directory whose manifest has been read and
// validated. Its shards are read one at a time with ReadFile.
type Step struct {
	Dir      string
	Manifest Manifest
}

// OpenStep reads and validates dir/_MANIFEST.json. A directory without one is
// refused with an error wrapping ErrNoManifest that names the directory.
func OpenStep(ctx context.Context, dir string) (*Step, error) {
	m, err := ReadManifest(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &Step{Dir: dir, Manifest: m}, nil
}

// NumFiles is the number of shards the manifest lists.
func (s *Step) NumFiles() int { return len(s.Manifest.Files) }

// Path is the full path of shard i.
func (s *Step) Path(i int) string { return storage.Join(s.Dir, s.Manifest.Files[i].Path) }

// ReadFile reads shard i whole and verifies its size and sha256 against the
// manifest (a mismatch is a *ChecksumError naming the file). Decode the bytes
// with ReadShardBytes.
func (s *Step) ReadFile(ctx context.Context, i int) ([]byte, error) {
	if i < 0 || i >= len(s.Manifest.Files) {
		return nil, fmt.Errorf("step %s has %d shards, no shard %d", s.Dir, len(s.Manifest.Files), i)
	}
	return VerifyFile(ctx, s.Dir, s.Manifest.Files[i])
}

// ReadShard reads shard i of s verified and decodes its rows, checking the
// row count against the manifest (and, for trajectories, every row's
// invariants).
func ReadShard[T Row](ctx context.Context, s *Step, i int) ([]T, error) {
	if want := KindOf[T](); s.Manifest.Kind != want {
		return nil, fmt.Errorf("step %s holds %s, not %s", s.Dir, s.Manifest.Kind, want)
	}
	b, err := s.ReadFile(ctx, i)
	if err != nil {
		return nil, err
	}
	p := s.Path(i)
	rows, err := ReadShardBytes[T](b)
	if err != nil {
		return nil, fmt.Errorf("decode shard %s: %w", p, err)
	}
	if int64(len(rows)) != s.Manifest.Files[i].Rows {
		return nil, fmt.Errorf("shard %s holds %d rows, the manifest says %d (rewrite the step)", p, len(rows), s.Manifest.Files[i].Rows)
	}
	if ts, ok := any(rows).([]Trajectory); ok {
		for r := range ts {
			if err := ts[r].Validate(); err != nil {
				return nil, fmt.Errorf("shard %s row %d: %w", p, r, err)
			}
		}
	}
	return rows, nil
}

// ReadStep reads a committed step: the manifest (refusing a directory
// without one with an error wrapping ErrNoManifest), then every shard it
// lists, verified and decoded, in manifest order. Shards are decoded in
// parallel, up to GOMAXPROCS at a time. Trajectories are decoded by the
// bulk columnar reader; prompts and eval records by parquet-go's generic
// reader.
func ReadStep[T Row](ctx context.Context, dir string) ([]T, Manifest, error) {
	s, err := OpenStep(ctx, dir)
	if err != nil {
		return nil, Manifest{}, err
	}
	if want := KindOf[T](); s.Manifest.Kind != want {
		return nil, Manifest{}, fmt.Errorf("step %s holds %s, not %s", dir, s.Manifest.Kind, want)
	}
	n := s.NumFiles()
	parts := make([][]T, n)
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			parts[i], errs[i] = ReadShard[T](ctx, s, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, Manifest{}, err
	}
	out := make([]T, 0, s.Manifest.Rows)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, s.Manifest, nil
}

// ReadShardBytes decodes a whole shard held in memory. Trajectories go
// through the bulk columnar reader (ReadTrajectoriesBulk); other row types
// through parquet-go's generic reader. It checks neither the manifest nor
// the rows' invariants: read verified bytes (Step.ReadFile), or use
// ReadShard, which also runs Trajectory.Validate.
func ReadShardBytes[T Row](b []byte) ([]T, error) {
	var zero T
	if _, ok := any(zero).(Trajectory); ok {
		ts, err := ReadTrajectoriesBulk(b)
		if err != nil {
			return nil, err
		}
		return any(ts).([]T), nil
	}
	return readGeneric[T](b)
}

// readGeneric decodes a shard with parquet-go's reflection-based reader.
func readGeneric[T Row](b []byte) ([]T, error) {
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)),
		parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	r := parquet.NewGenericReader[T](f)
	defer r.Close()
	out := make([]T, f.NumRows())
	got := 0
	for got < len(out) {
		n, err := r.Read(out[got:])
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read row %d: %w", got, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("reader stopped at row %d of %d", got, len(out))
		}
	}
	if got != len(out) {
		return nil, fmt.Errorf("read %d rows, the footer says %d", got, len(out))
	}
	return out, nil
}
