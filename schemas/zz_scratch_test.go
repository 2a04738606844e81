//go:build unix

package schemas

import (
	"context"
	"path/filepath"
	"testing"
)

func BenchmarkScratchWrite(b *testing.B) {
	rows := benchRowsOnce()[:3000]
	var logical int64
	for i := range rows {
		logical += logicalBytes(&rows[i])
	}
	b.SetBytes(logical)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := WriteShard(context.Background(), filepath.Join(b.TempDir(), "x.parquet"), rows); err != nil {
			b.Fatal(err)
		}
	}
}
