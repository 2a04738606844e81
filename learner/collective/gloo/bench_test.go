//go:build cgo && !purego

package gloo

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// benchFloats is the all-reduce size of the benchmark: 16 MiB of float32.
const benchFloats = 4 << 20

// programBenchPeer is rank 1 of BenchmarkAllReduceLoopback: it receives a
// count by broadcast from rank 0 and all-reduces that many times, until the
// count is 0.
func programBenchPeer() int {
	g, c, err := join(testOptions())
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	defer c.Close()
	ctx := context.Background()
	buf := make([]float32, benchFloats)
	var cmd [8]byte
	for {
		if err := c.Broadcast(ctx, collective.Bytes(cmd[:]), 0); err != nil {
			return failed(err)
		}
		n := binary.LittleEndian.Uint64(cmd[:])
		if n == 0 {
			return 0
		}
		for i := uint64(0); i < n; i++ {
			if err := c.AllReduce(ctx, collective.Float32s(buf)); err != nil {
				return failed(err)
			}
		}
	}
}

// BenchmarkAllReduceLoopback measures Gloo's all-reduce of 16 MiB between
// two rank processes on loopback (this process is rank 0) as bytes reduced
// per second, beside the bandwidth of copying the same buffer in memory in
// the same run; ratio is the first over the second.
func BenchmarkAllReduceLoopback(b *testing.B) {
	port := disttest.FreePort(b)
	rs := disttest.Launch(b, disttest.Spec{Program: "benchpeer", Size: 2, Ranks: []int{1}, Port: port})
	ctx := context.Background()
	g, err := collective.Join(ctx, collective.Env{Rank: 0, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}, testOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	c, err := New(ctx, g)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]float32, benchFloats)
	send := func(n uint64) {
		var cmd [8]byte
		binary.LittleEndian.PutUint64(cmd[:], n)
		if err := c.Broadcast(ctx, collective.Bytes(cmd[:]), 0); err != nil {
			b.Fatal(err)
		}
	}
	send(1) // warm up: connections and page faults
	if err := c.AllReduce(ctx, collective.Float32s(buf)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	send(uint64(b.N))
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := c.AllReduce(ctx, collective.Float32s(buf)); err != nil {
			b.Fatal(err)
		}
	}
	reduce := time.Since(start)
	b.StopTimer()
	send(0)
	rs.Wait(30 * time.Second)

	dst := make([]float32, benchFloats)
	copy(dst, buf)
	copies := 20
	start = time.Now()
	for i := 0; i < copies; i++ {
		copy(dst, buf)
	}
	memcpy := time.Since(start)
	bytes := float64(4 * benchFloats)
	arGBs := bytes * float64(b.N) / reduce.Seconds() / 1e9
	cpGBs := bytes * float64(copies) / memcpy.Seconds() / 1e9
	b.SetBytes(int64(bytes))
	b.ReportMetric(arGBs, "allreduce-GB/s")
	b.ReportMetric(cpGBs, "memcpy-GB/s")
	b.ReportMetric(arGBs/cpGBs, "ratio")
	b.Logf("gloo all-reduce of %d MiB, 2 ranks on loopback: %.2f GB/s; memory copy %.2f GB/s; ratio %.3f",
		4*benchFloats>>20, arGBs, cpGBs, arGBs/cpGBs)
}
