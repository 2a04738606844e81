//go:build unix

package schemas

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
)

// Benchmark sizes: a step of 10,000 trajectories of 2,000 response tokens
// (prompt ~200 tokens, mostly policy tokens with 0-3 interaction spans,
// ~4 bytes of response text per token), written as 10 shards. With -short
// (make bench-smoke), 100 trajectories of 200 tokens.
const benchShards = 10

func benchSize() (rows, tokens int) {
	if testing.Short() {
		return 100, 200
	}
	return 10_000, 2_000
}

// logicalBytes is the in-memory size of a row's data: fixed-width values at
// their Go width (int8 token sources count 1 byte), strings at their length.
// Throughputs below are logical bytes per second, whatever the file size.
func logicalBytes(t *Trajectory) int64 {
	n := 4 + 8 + 8 + 4 + 4 + 1 + 4 // schema_version, step, policy_version, sample_index, reward, correct, advantage
	n += len(t.Run) + len(t.PromptID) + len(t.DataSource) + len(t.ResponseText) + len(t.FinishReason)
	n += 4*len(t.PromptIDs) + 4*len(t.ResponseIDs) + len(t.TokenSource) + 4*len(t.BehaviorLogProbs)
	for i := range t.InteractionAgent {
		n += len(t.InteractionAgent[i]) + len(t.InteractionQuery[i]) + len(t.InteractionResult[i]) + len(t.InteractionStatus[i])
	}
	n += 4*len(t.InteractionLatencyMs) + 4*len(t.InteractionSpanStart) + 4*len(t.InteractionSpanEnd) + len(t.InteractionNoisy)
	return int64(n)
}

// cpuTime is the user+system CPU time this process has used, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs fn and returns its wall and CPU time.
func measure(fn func()) (wall, cpu time.Duration) {
	runtime.GC()
	c0, t0 := cpuTime(), time.Now()
	fn()
	return time.Since(t0), cpuTime() - c0
}

func benchRowsOnce() []Trajectory {
	rng := rand.New(rand.NewPCG(42, 42))
	benchRows, benchTokens := benchSize()
	rows := make([]Trajectory, benchRows)
	for i := range rows {
		rows[i] = genTrajectory(rng, genOptions{promptLen: 150 + rng.IntN(101), respLen: benchTokens, maxInteractions: 3, textPerToken: 4}, i)
	}
	return rows
}

// BenchmarkTrajectoryIO writes a step of trajectories (one goroutine per
// shard, up to GOMAXPROCS at once, as the Beam sink does per bundle), then
// decodes the same shards with the bulk reader and with parquet-go's
// GenericReader[Trajectory] one after the other on one goroutine, and
// reads the step end to end with ReadStep. Metrics:
//
//	write_MB/s, write_MB/s/core  sink throughput (wall; per CPU-second used)
//	generic_write_MB/s/core      the same shards through parquet-go's GenericWriter
//	write/generic_write          ratio of the two per CPU-second, same run
//	bulk_MB/s, generic_MB/s      single-goroutine decode of verified bytes
//	bulk/generic                 ratio of the two, same run (target >= 4)
//	readstep_MB/s                ReadStep from disk: manifest, sha256, parallel decode, Validate
//	shard_MB                     bytes on disk (zstd)
func BenchmarkTrajectoryIO(b *testing.B) {
	rows := benchRowsOnce()
	benchRows := len(rows)
	var logical int64
	for i := range rows {
		logical += logicalBytes(&rows[i])
	}
	mb := float64(logical) / 1e6
	shards := splitRows(rows, benchRows/benchShards)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := rundir.Step(filepath.Join(b.TempDir(), "run"), int64(i))

		// Write: shards in parallel, then the manifest.
		var files []ManifestFile
		wWall, wCPU := measure(func() {
			files = writeShards(b, ctx, dir, shards)
			if err := CommitManifest(ctx, dir, Manifest{Kind: KindOf[Trajectory](), Files: files}); err != nil {
				b.Fatal(err)
			}
		})
		// The same shards through parquet-go's GenericWriter, for the ratio.
		genericTrajectoryWriter = true
		_, gwCPU := measure(func() { writeShards(b, ctx, filepath.Join(b.TempDir(), "generic"), shards) })
		genericTrajectoryWriter = false

		s, err := OpenStep(ctx, dir)
		if err != nil {
			b.Fatal(err)
		}
		raw := make([][]byte, s.NumFiles())
		for f := range raw {
			if raw[f], err = s.ReadFile(ctx, f); err != nil {
				b.Fatal(err)
			}
		}

		var got int
		bWall, bCPU := measure(func() {
			for _, r := range raw {
				ts, err := ReadTrajectoriesBulk(r)
				if err != nil {
					b.Fatal(err)
				}
				got += len(ts)
			}
		})
		gWall, _ := measure(func() {
			for _, r := range raw {
				ts, err := readGeneric[Trajectory](r)
				if err != nil {
					b.Fatal(err)
				}
				got += len(ts)
			}
		})
		var stepRows []Trajectory
		sWall, _ := measure(func() {
			if stepRows, _, err = ReadStep[Trajectory](ctx, dir); err != nil {
				b.Fatal(err)
			}
		})
		if got != 2*benchRows || len(stepRows) != benchRows {
			b.Fatalf("read %d rows with bulk+generic and %d with ReadStep, want %d each", got, len(stepRows), benchRows)
		}
		if d := diffRow(normalized(rows[benchRows-1]), normalized(stepRows[benchRows-1])); d != "" {
			b.Fatalf("last row read back differs: %s", d)
		}
		stepRows = nil

		b.ReportMetric(mb/wWall.Seconds(), "write_MB/s")
		b.ReportMetric(mb/wCPU.Seconds(), "write_MB/s/core")
		b.ReportMetric(mb/gwCPU.Seconds(), "generic_write_MB/s/core")
		b.ReportMetric(gwCPU.Seconds()/wCPU.Seconds(), "write/generic_write")
		b.ReportMetric(mb/bWall.Seconds(), "bulk_MB/s")
		b.ReportMetric(mb/bCPU.Seconds(), "bulk_MB/s/core")
		b.ReportMetric(mb/gWall.Seconds(), "generic_MB/s")
		b.ReportMetric(gWall.Seconds()/bWall.Seconds(), "bulk/generic")
		b.ReportMetric(mb/sWall.Seconds(), "readstep_MB/s")
		b.ReportMetric(float64(s.Manifest.Bytes)/1e6, "shard_MB")
		b.ReportMetric(mb, "logical_MB")
		_ = os.RemoveAll(dir)
	}
}

// writeShards writes one shard per element of shards under dir/shards,
// up to GOMAXPROCS at once (as the Beam sink does per bundle), and returns
// their manifest entries.
func writeShards(b *testing.B, ctx context.Context, dir string, shards [][]Trajectory) []ManifestFile {
	files := make([]ManifestFile, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for s := range shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			files[s], errs[s] = WriteShard(ctx, filepath.Join(dir, rundir.ShardsName, ShardName(s)), shards[s])
			files[s].Path = rundir.ShardsName + "/" + ShardName(s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return files
}
