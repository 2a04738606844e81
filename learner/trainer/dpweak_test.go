//go:build cgo && !purego

package trainer

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/benchstat"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// weakScalingRounds are the alternated rounds of BenchmarkWeakScaling.
const weakScalingRounds = 3

// BenchmarkWeakScaling measures the group's weak scaling on this CPU with
// every rank pinned to a core of its own (taskset): one rank of one
// thread on core 0 against two ranks of one thread each on cores 0 and 1
// taking twice the batch (each rank the one rank's share), at ZeRO stages
// 1, 2 and 3, over Gloo on loopback. The efficiency of a round is the one
// rank's step time over the two ranks' (1.0: the second core's batch came
// for free); the rounds alternate which runs first, and the figure is the
// median with the range. It also reports the bytes rank 0 hands Gloo a
// step against what the stage must move: 2P float32 elements for stages 1
// and 2 (a reduce-scatter of the gradient and an all-gather of the
// weights) and 3P for stage 3 (the weights gathered for the forward and
// again for the backward, the gradient reduce-scattered), each times the
// ring's (N-1)/N; zero3-kept is stage 3 keeping every gathered unit
// between passes (DPConfig.KeepGathered, learner.keep_gathered_mib), which
// gathers the weights once a mini-batch: 2P. AIPO_WEAK_STAGES=zero1,zero3
// runs those stages alone. Shapes: BenchmarkStepVsPyTorch's 21.7M and Qwen3-0.6B's
// width and vocabulary with 2 layers (187M); -short (make bench-smoke)
// runs the 0.8M shape, one round. Target: efficiency at least 0.9.
func BenchmarkWeakScaling(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Fatalf("weak scaling pins two ranks to two cores; this machine has %d", runtime.NumCPU())
	}
	shapes, rounds := []string{"21.7M-vocab32000", "qwen3-0.6B-2layers"}, weakScalingRounds
	if testing.Short() {
		shapes, rounds = []string{"0.8M-vocab512"}, 1
	}
	stages := []struct {
		name, mode string
		moved      float64 // elements a rank moves a step, in parameters
	}{{"zero1", "dp", 2}, {"zero2", "dp2", 2}, {"zero3", "dp3", 3}, {"zero3-kept", "dp3k", 2}}
	if only := os.Getenv("AIPO_WEAK_STAGES"); only != "" {
		// A rerun of some stages (a comma-separated list of names).
		want := strings.Split(only, ",")
		stages = slices.DeleteFunc(stages, func(st struct {
			name, mode string
			moved      float64
		}) bool {
			return !slices.Contains(want, st.name)
		})
		if len(stages) == 0 {
			b.Fatalf("AIPO_WEAK_STAGES=%s names none of zero1, zero2, zero3, zero3-kept", only)
		}
	}
	run := func(b *testing.B, shape, mode string, size int) dpBenchResult {
		return dpBenchLaunch(b, disttest.Spec{Program: "dpbench", Size: size,
			Env: func(int) []string {
				return []string{"AIPO_DPB_SHAPE=" + shape, "AIPO_DPB_MODE=" + mode, "AIPO_DPB_BATCH_SCALE=" + strconv.Itoa(size),
					"GOMAXPROCS=1", "OPENBLAS_NUM_THREADS=1"}
			},
			CPUs: func(rank int) []int { return []int{rank} },
		}, mode, size, 1)
	}
	for _, shape := range shapes {
		b.Run(shape, func(b *testing.B) {
			for range b.N {
				for _, st := range stages {
					var one, two []float64
					var sent, params int64
					for r := range rounds {
						sizes := []int{1, 2}
						if r%2 == 1 {
							sizes = []int{2, 1}
						}
						for _, size := range sizes {
							res := run(b, shape, st.mode, size)
							if size == 1 {
								one = append(one, benchstat.Median(res.Seconds))
							} else {
								two = append(two, benchstat.Median(res.Seconds))
								sent, params = res.Sent, res.Params
							}
						}
					}
					eff := benchstat.Of(benchstat.Ratios(one, two))
					ideal := st.moved * 4 * float64(params) * 0.5 // float32, ring factor (N-1)/N at N = 2
					b.ReportMetric(eff.Median, "efficiency-"+st.name)
					b.ReportMetric(float64(sent)/ideal, "sent/ideal-"+st.name)
					fmt.Printf("weak-scaling %s %s: 1 rank x 1 core %s s/step, 2 ranks x 1 core on twice the batch %s s/step, efficiency %s (%d rounds, alternated; target >= 0.9); rank 0 sent %.1f MB a step, %.3fx the stage's %gP elements\n",
						shape, st.name, benchstat.Of(one).Format("%.3f"), benchstat.Of(two).Format("%.3f"), eff.Format("%.2f"), rounds,
						float64(sent)/1e6, float64(sent)/ideal, st.moved)
				}
			}
		})
	}
}
