//go:build !cgo || purego

package zstdcodec

import "github.com/parquet-go/parquet-go/compress/zstd"

var fastest = &zstd.Codec{Level: zstd.SpeedFastest}

func encode(dst, src []byte) ([]byte, error) { return fastest.Encode(dst, src) }

func backend() string { return "klauspost/compress zstd SpeedFastest (pure Go)" }
