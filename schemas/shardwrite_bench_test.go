//go:build unix

package schemas

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkWriteShardSerial writes one shard of 3,000 of BenchmarkTrajectoryIO's
// trajectories (all of them with -short) on one goroutine.
func BenchmarkWriteShardSerial(b *testing.B) {
	rows := benchRowsOnce()
	rows = rows[:min(3000, len(rows))]
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
