//go:build cgo && !purego

package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/hfconfig"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// dpBenchSteps are the timed RL steps of each process, after one warm-up.
const dpBenchSteps = 3

// dpBenchResult is what rank 0 of a BenchmarkDataParallelStep process
// group prints, as one JSON line after "dpbench ".
type dpBenchResult struct {
	Params  int64     `json:"params"`
	Seconds []float64 `json:"step_seconds"`
	Sent    int64     `json:"sent_bytes_per_step"`
	PeakRSS int64     `json:"peak_rss_bytes"` // rank 0's (getrusage)
}

// programDPBench is one rank of BenchmarkDataParallelStep: the RL step of
// shape AIPO_DPB_SHAPE (BenchmarkStepVsPyTorch's shapes, its batch as RL
// samples) taken by the group (AIPO_DPB_MODE dp: RLStepDP) or by this one
// process alone as a group of one with one shard (plain: what one process
// runs by default, SingleShards, the whole mini-batch packed), one
// warm-up then dpBenchSteps timed; dp2 is dp at ZeRO stage 2, dp1s dp with
// one virtual shard a rank (learner.deterministic false).
func programDPBench() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
		return 1
	}
	i := slices.IndexFunc(stepBenchShapes, func(s stepBenchShape) bool { return s.name == os.Getenv("AIPO_DPB_SHAPE") })
	if i < 0 {
		return fail(fmt.Errorf("AIPO_DPB_SHAPE=%q names no shape", os.Getenv("AIPO_DPB_SHAPE")))
	}
	sh := stepBenchShapes[i]
	c, err := hfconfig.Parse([]byte(sh.config))
	if err != nil {
		return fail(err)
	}
	m, err := model.New(c, 1)
	if err != nil {
		return fail(err)
	}
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay = 1e-5, 0
	opt, err := optim.New(oc)
	if err != nil {
		return fail(err)
	}
	l := &Learner{Policy: m, Opt: opt}
	ctx := context.Background()
	if mode := os.Getenv("AIPO_DPB_MODE"); mode == "dp" || mode == "dp2" || mode == "dp3" || mode == "dp3k" || mode == "dp1s" {
		// A rank of one thread pinned to one core (BenchmarkWeakScaling)
		// answers the others' heartbeats only between the long
		// non-preemptible stretches of its step (a 748 MB gradient copied
		// at 187M, its pages touched for the first time on this virtual
		// machine): the first 187M run at 2 x 1 core failed with rank 0's
		// store silent for 11 s, past the default 10 s. A stalled rank is
		// not what this measures; a minute is.
		comm, leave, err := joinGloo(ctx, collective.Options{RendezvousTimeout: time.Minute, StallAfter: time.Minute})
		if err != nil {
			return fail(err)
		}
		defer leave()
		zero := 1
		switch mode {
		case "dp2":
			zero = 2
		case "dp3", "dp3k":
			zero = 3
		}
		shards := DefaultShards
		if mode == "dp1s" {
			shards = comm.Size()
		}
		var keep int64
		if mode == "dp3k" {
			keep = 1 << 40 // every unit
		}
		if err := l.EnableDataParallel(comm, DPConfig{Shards: shards, Zero: zero, KeepGathered: keep}); err != nil {
			return fail(err)
		}
	}
	if os.Getenv("AIPO_DPB_MODE") == "plain" {
		if err := l.EnableSingle(DPConfig{Shards: SingleShards}); err != nil {
			return fail(err)
		}
	}
	// AIPO_DPB_BATCH_SCALE multiplies the shape's batch (BenchmarkWeakScaling:
	// N ranks on N times the batch).
	batch := sh.batch
	if v := os.Getenv("AIPO_DPB_BATCH_SCALE"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			return fail(fmt.Errorf("AIPO_DPB_BATCH_SCALE=%q: want a positive integer", v))
		}
		batch *= k
	}
	r := rand.New(rand.NewPCG(1, 2))
	samples := make([]RLSample, batch)
	for s := range samples {
		toks := make([]int32, sh.seq)
		src := make([]loss.Source, sh.seq-1)
		for j := range src {
			src[j] = loss.Internal
		}
		for j := range toks {
			toks[j] = int32(r.IntN(c.VocabSize))
		}
		samples[s] = RLSample{Sequence: Sequence{Prompt: toks[:1], Response: toks[1:]}, Source: src, Advantage: float32(r.NormFloat64())}
	}
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 4096, PPOEpochs: 1, MiniBatches: 1}
	cfg.Loss.KLCoef = 0
	res := dpBenchResult{Params: int64(model.ParamCount(c))}
	for k := range dpBenchSteps + 1 {
		var sent int64
		sent = l.DP.Sent
		t0 := time.Now()
		_, err = l.RLStepDP(ctx, cfg, samples)
		if err != nil {
			return fail(err)
		}
		if k > 0 {
			res.Seconds = append(res.Seconds, time.Since(t0).Seconds())
			res.Sent = l.DP.Sent - sent
		}
	}
	if os.Getenv("RANK") == "0" {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return fail(err)
		}
		res.PeakRSS = ru.Maxrss << 10 // kilobytes on Linux
		b, _ := json.Marshal(res)
		fmt.Printf("dpbench %s\n", b)
	}
	return 0
}

// dpBenchRun runs size ranks of mode on shape with threads threads each
// and returns rank 0's result; extra are more variables for every rank.
func dpBenchRun(b *testing.B, shape, mode string, size, threads int, extra ...string) dpBenchResult {
	b.Helper()
	return dpBenchLaunch(b, disttest.Spec{Program: "dpbench", Size: size, Env: func(int) []string {
		t := strconv.Itoa(threads)
		return append([]string{"AIPO_DPB_SHAPE=" + shape, "AIPO_DPB_MODE=" + mode, "GOMAXPROCS=" + t, "OPENBLAS_NUM_THREADS=" + t}, extra...)
	}}, mode, size, threads)
}

// dpBenchLaunch launches spec's ranks and returns rank 0's result.
func dpBenchLaunch(b *testing.B, spec disttest.Spec, mode string, size, threads int) dpBenchResult {
	b.Helper()
	rs := disttest.Launch(b, spec)
	for _, e := range rs.Wait(10 * time.Minute) {
		if e.Code != 0 {
			b.Fatalf("%s, %d x %d threads: rank %d exited %d:\n%s", mode, size, threads, e.Rank, e.Code, e.Output)
		}
	}
	for _, line := range strings.Split(rs.Output(0), "\n") {
		if js, ok := strings.CutPrefix(line, "dpbench "); ok {
			var r dpBenchResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				b.Fatal(err)
			}
			return r
		}
	}
	b.Fatalf("rank 0 printed no result:\n%s", rs.Output(0))
	return dpBenchResult{}
}

// BenchmarkDataParallelStep times an RL learner step (BenchmarkStepVsPyTorch's
// shapes and batches, float32, CPU) taken by 2 rank processes of 1 thread
// each (RLStepDP over Gloo on loopback) against one process of 2 threads
// (RLStep, the one-process learner; and RLStepDP alone, the same
// arithmetic as the group's), each in processes of its own, one after the
// other, and reports the median seconds of each, their ratio
// (speedup-2x1-vs-1x2 = one process's over the group's) and the bytes a
// rank hands the engine a step against ZeRO's 2P elements a rank (ring
// factor (N-1)/N, float32: 8P(N-1)/N bytes); then the 2 ranks again at
// ZeRO stages 2 and 3, and rank 0's peak resident memory at each stage; then
// with one virtual shard a rank (learner.deterministic false). With -short (make
// bench-smoke) the 0.8M shape alone; otherwise 21.7M and Qwen3-0.6B's
// width and vocabulary with 2 layers.
func BenchmarkDataParallelStep(b *testing.B) {
	shapes := []string{"21.7M-vocab32000", "qwen3-0.6B-2layers"}
	if testing.Short() {
		shapes = []string{"0.8M-vocab512"}
	}
	median := func(x []float64) float64 {
		y := slices.Clone(x)
		slices.Sort(y)
		return y[len(y)/2]
	}
	for _, shape := range shapes {
		b.Run(shape, func(b *testing.B) {
			for range b.N {
				plain := dpBenchRun(b, shape, "plain", 1, 2)
				one := dpBenchRun(b, shape, "dp", 1, 2)
				two := dpBenchRun(b, shape, "dp", 2, 1)
				two2 := dpBenchRun(b, shape, "dp2", 2, 1)
				two3 := dpBenchRun(b, shape, "dp3", 2, 1)
				fast := dpBenchRun(b, shape, "dp1s", 2, 1)
				zero := 8 * float64(two.Params) * 0.5 // 2P elements of 4 bytes, ring factor 1/2
				b.ReportMetric(median(plain.Seconds), "s/step-1x2-plain")
				b.ReportMetric(median(one.Seconds), "s/step-1x2-dp")
				b.ReportMetric(median(two.Seconds), "s/step-2x1-dp")
				b.ReportMetric(median(plain.Seconds)/median(two.Seconds), "speedup-2x1-vs-1x2")
				b.ReportMetric(float64(two.Sent), "sent-B/step")
				b.ReportMetric(float64(two.Sent)/zero, "sent/ZeRO-2P")
				b.ReportMetric(median(two2.Seconds), "s/step-2x1-zero2")
				b.ReportMetric(median(plain.Seconds)/median(two2.Seconds), "speedup-2x1-zero2-vs-1x2")
				b.ReportMetric(float64(two2.Sent)/zero, "sent/ZeRO-2P-zero2")
				b.ReportMetric(median(fast.Seconds), "s/step-2x1-one-shard-a-rank")
				b.ReportMetric(median(plain.Seconds)/median(fast.Seconds), "speedup-2x1-one-shard-a-rank-vs-1x2")
				b.ReportMetric(float64(two.PeakRSS)/(1<<20), "rank0-peak-MiB-zero1")
				b.ReportMetric(float64(two2.PeakRSS)/(1<<20), "rank0-peak-MiB-zero2")
				b.ReportMetric(median(two3.Seconds), "s/step-2x1-zero3")
				b.ReportMetric(float64(two3.Sent)/zero, "sent/ZeRO-2P-zero3")
				b.ReportMetric(float64(two3.PeakRSS)/(1<<20), "rank0-peak-MiB-zero3")
				b.Logf("%s: ZeRO-3 at 2 ranks of 1 thread %.3f s a step, rank 0 sent %.3fx ZeRO's 2P elements, peak %.0f MiB",
					shape, median(two3.Seconds), float64(two3.Sent)/zero, float64(two3.PeakRSS)/(1<<20))
				b.Logf("%s (%d parameters): one process, 2 threads %.3f s (one shard, the default) and %.3f s (8 shards, as --nproc 1); 2 ranks of 1 thread %.3f s at ZeRO-1, %.3f s at ZeRO-2, %.3f s with one shard a rank; rank 0 sent %.1f MB a step, %.3fx ZeRO's 2P elements (%.1f MB; ZeRO-2 %.3fx); rank 0's peak %.0f MiB at ZeRO-1, %.0f MiB at ZeRO-2",
					shape, two.Params, median(plain.Seconds), median(one.Seconds), median(two.Seconds), median(two2.Seconds), median(fast.Seconds), float64(two.Sent)/1e6, float64(two.Sent)/zero, zero/1e6,
					float64(two2.Sent)/zero, float64(two.PeakRSS)/(1<<20), float64(two2.PeakRSS)/(1<<20))
			}
		})
	}
}
