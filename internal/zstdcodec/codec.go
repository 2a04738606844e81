// Package zstdcodec is the zstd codec of aipo's Parquet shards. Pages are
// compressed with the reference C library (libzstd, through cgo) in its
// fast mode, level -1, when the binary is built with cgo, and with
// klauspost/compress's SpeedFastest otherwise; both write standard zstd
// frames that any reader decodes. Decoding is always the pure-Go decoder.
//
// Why not klauspost alone: on the trajectory benchmark's columns, measured
// on one core here (zstd CLI and klauspost side by side, 1 MiB blocks),
// libzstd level -1 compresses response text 2.4x faster (270 vs 113 MB/s)
// at the same ratio (3.70 vs 3.72) and random float log-probabilities 11x
// faster (2,290 vs 202 MB/s) at a ratio of 1.23 instead of 1.36; zstd
// is otherwise most of the shard writer's CPU time.
package zstdcodec

import (
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// Codec implements parquet-go's compress.Codec for ZSTD. The zero value is
// ready to use and safe for concurrent use.
type Codec struct {
	dec zstd.Codec
}

// String names the codec as Parquet does.
func (c *Codec) String() string { return "ZSTD" }

// CompressionCodec is format.Zstd.
func (c *Codec) CompressionCodec() format.CompressionCodec { return format.Zstd }

// Encode writes the compressed src into dst (from its start, growing it as
// needed) and returns it.
func (c *Codec) Encode(dst, src []byte) ([]byte, error) { return encode(dst, src) }

// Decode writes the decompressed src into dst and returns it.
func (c *Codec) Decode(dst, src []byte) ([]byte, error) { return c.dec.Decode(dst, src) }

// Backend names the encoder linked into this binary.
func Backend() string { return backend() }
