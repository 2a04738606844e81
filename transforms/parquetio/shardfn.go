package parquetio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// shardHashHex is how many hex digits of a shard's sha256 name it (128 bits).
const shardHashHex = 32

// writeBatch is how many rows are handed to the Parquet writer at once.
const writeBatch = 256

// writeShardsFn writes the rows of each bundle to content-named shards in
// Dir/shards/ and emits one schemas.ManifestFile per shard (Path relative to
// Dir). See the package documentation for the naming rule.
type writeShardsFn[T schemas.Row] struct {
	// Dir is the step directory (local or gs://).
	Dir string `json:"dir"`
	// MaxShardRows closes a shard and starts the next after this many rows.
	MaxShardRows int `json:"max_shard_rows"`

	w   *schemas.ShardWriter[T]
	tmp string // temporary path of the open shard
	buf []T
}

func (fn *writeShardsFn[T]) configure(dir string, maxShardRows int) {
	fn.Dir, fn.MaxShardRows = dir, maxShardRows
}

// StartBundle forgets the state of a previous bundle that ended in an error.
func (fn *writeShardsFn[T]) StartBundle(ctx context.Context, _ func(schemas.ManifestFile)) {
	fn.abort(ctx)
}

// ProcessElement appends one row to the bundle's open shard.
func (fn *writeShardsFn[T]) ProcessElement(ctx context.Context, row T, emit func(schemas.ManifestFile)) error {
	if fn.w == nil {
		if err := fn.open(ctx); err != nil {
			return err
		}
	}
	fn.buf = append(fn.buf, row)
	if len(fn.buf) >= writeBatch {
		if err := fn.flush(ctx); err != nil {
			return err
		}
	}
	if fn.w.Rows()+int64(len(fn.buf)) >= int64(fn.MaxShardRows) {
		return fn.finish(ctx, emit)
	}
	return nil
}

// FinishBundle commits the bundle's last shard, if it has rows.
func (fn *writeShardsFn[T]) FinishBundle(ctx context.Context, emit func(schemas.ManifestFile)) error {
	if fn.w == nil {
		return nil
	}
	return fn.finish(ctx, emit)
}

// Teardown removes a temporary shard left by a failed bundle.
func (fn *writeShardsFn[T]) Teardown(ctx context.Context) {
	fn.abort(ctx)
}

func (fn *writeShardsFn[T]) open(ctx context.Context) error {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return fmt.Errorf("parquetio: temporary shard name: %w", err)
	}
	fn.tmp = storage.Join(fn.Dir, rundir.ShardsName, ".tmp-"+storage.TempOwner()+"-"+hex.EncodeToString(r[:])+".parquet")
	w, err := schemas.NewShardWriter[T](ctx, fn.tmp)
	if err != nil {
		return fmt.Errorf("parquetio: %w", err)
	}
	fn.w = w
	return nil
}

func (fn *writeShardsFn[T]) flush(ctx context.Context) error {
	if len(fn.buf) == 0 {
		return nil
	}
	if err := fn.w.Write(fn.buf...); err != nil {
		fn.abort(ctx)
		return fmt.Errorf("parquetio: %w", err)
	}
	clear(fn.buf)
	fn.buf = fn.buf[:0]
	return nil
}

// finish closes the open shard, renames it to its content name and emits
// its manifest entry.
func (fn *writeShardsFn[T]) finish(ctx context.Context, emit func(schemas.ManifestFile)) error {
	if err := fn.flush(ctx); err != nil {
		return err
	}
	w, tmp := fn.w, fn.tmp
	fn.w, fn.tmp = nil, ""
	f, err := w.Close()
	if err != nil {
		_ = storage.Remove(ctx, tmp)
		return fmt.Errorf("parquetio: %w", err)
	}
	name := ContentName(f.SHA256)
	if err := storage.Rename(ctx, tmp, storage.Join(fn.Dir, rundir.ShardsName, name)); err != nil {
		_ = storage.Remove(ctx, tmp)
		return fmt.Errorf("parquetio: commit shard %s: %w", name, err)
	}
	f.Path = rundir.ShardsName + "/" + name
	emit(f)
	return nil
}

// abort drops the open shard and its temporary file.
func (fn *writeShardsFn[T]) abort(ctx context.Context) {
	clear(fn.buf)
	fn.buf = fn.buf[:0]
	if fn.w == nil {
		return
	}
	log.Infof(ctx, "parquetio: discarding unfinished shard %s", fn.tmp)
	fn.w.Abort(ctx)
	fn.w, fn.tmp = nil, ""
}

// ContentName is the file name of a shard whose content has the given sha256
// (hex): "part-" and the first 128 bits of the hash.
func ContentName(sha256Hex string) string {
	return "part-" + sha256Hex[:shardHashHex] + ".parquet"
}
