package schemas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/zstdcodec"
	"github.com/parquet-go/parquet-go"
)

// Row is the set of row types that shards hold.
type Row interface {
	Trajectory | Prompt | EvalRecord
}

// KindOf names the manifest kind of a row type.
func KindOf[T Row]() string {
	var zero T
	switch any(zero).(type) {
	case Trajectory:
		return "trajectories"
	case Prompt:
		return "prompts"
	default:
		return "eval"
	}
}

// RowGroupRows is the number of rows per Parquet row group: large enough for
// good compression, small enough that a reader's memory stays bounded.
const RowGroupRows = 1024

// ShardWriter streams rows of type T into one zstd-compressed Parquet file
// and computes the ManifestFile entry (rows, bytes, sha256) as it writes.
type ShardWriter[T Row] struct {
	path  string
	out   storage.Writer
	sum   hash.Hash
	count countingWriter
	pw    rowWriter[T]
	rows  int64
	done  bool
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// NewShardWriter creates the shard at path (local or gs://).
func NewShardWriter[T Row](ctx context.Context, path string) (*ShardWriter[T], error) {
	out, err := storage.Create(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("create shard %s: %w", path, err)
	}
	w := &ShardWriter[T]{path: path, out: out, sum: sha256.New()}
	w.count.w = io.MultiWriter(out, w.sum)
	if KindOf[T]() == "trajectories" && !genericTrajectoryWriter {
		tw, err := newTrajectoryWriter(&w.count)
		if err != nil {
			out.Close()
			return nil, err
		}
		w.pw = any(tw).(rowWriter[T])
	} else {
		w.pw = parquet.NewGenericWriter[T](&w.count, shardWriterOptions()...)
	}
	return w, nil
}

// rowWriter is what ShardWriter needs of a Parquet writer: parquet-go's
// GenericWriter for prompts and eval records, the bulk trajectory writer
// for trajectories.
type rowWriter[T any] interface {
	Write([]T) (int, error)
	Close() error
}

// genericTrajectoryWriter makes ShardWriter write trajectories through
// parquet-go's GenericWriter; tests set it to compare the two writers.
var genericTrajectoryWriter = false

// shardCodec compresses every shard page (libzstd's fast mode where the
// binary has cgo; see internal/zstdcodec).
var shardCodec = &zstdcodec.Codec{}

// shardWriterOptions are the generic writer's settings for every shard.
func shardWriterOptions() []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(shardCodec),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.CreatedBy("aipo", "1", ""),
	}
}

// Write appends rows.
func (w *ShardWriter[T]) Write(rows ...T) error {
	if w.done {
		return errors.New("shard writer: write after close")
	}
	if _, err := w.pw.Write(rows); err != nil {
		return fmt.Errorf("write shard %s: %w", w.path, err)
	}
	w.rows += int64(len(rows))
	return nil
}

// Rows is the number of rows written so far.
func (w *ShardWriter[T]) Rows() int64 { return w.rows }

// Close finishes the file, makes it durable and returns its manifest entry,
// with Path set to the file's base name.
func (w *ShardWriter[T]) Close() (ManifestFile, error) {
	if w.done {
		return ManifestFile{}, errors.New("shard writer: closed twice")
	}
	w.done = true
	if err := w.pw.Close(); err != nil {
		w.out.Close()
		return ManifestFile{}, fmt.Errorf("finish shard %s: %w", w.path, err)
	}
	if err := w.out.Close(); err != nil {
		return ManifestFile{}, fmt.Errorf("close shard %s: %w", w.path, err)
	}
	return ManifestFile{
		Path:   storage.Base(w.path),
		Rows:   w.rows,
		Bytes:  w.count.n,
		SHA256: hex.EncodeToString(w.sum.Sum(nil)),
	}, nil
}

// Abort closes the writer and removes the partial file.
func (w *ShardWriter[T]) Abort(ctx context.Context) {
	if !w.done {
		w.done = true
		w.out.Close()
	}
	_ = storage.Remove(ctx, w.path)
}

// WriteShard writes rows to one shard at path and returns its entry.
func WriteShard[T Row](ctx context.Context, path string, rows []T) (ManifestFile, error) {
	w, err := NewShardWriter[T](ctx, path)
	if err != nil {
		return ManifestFile{}, err
	}
	if err := w.Write(rows...); err != nil {
		w.Abort(ctx)
		return ManifestFile{}, err
	}
	return w.Close()
}
