//go:build vllm

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/benchstat"
	"github.com/aipo-rl/aipo/internal/vllmserver"
	"github.com/aipo-rl/aipo/learner/hfmodel"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

// BenchmarkLoRASyncVsFull measures a step's weight sync to one real vLLM
// (CPU build, float32, LoRA enabled) both ways, on the same server in
// alternated rounds: a LoRA run's push of the step's adapter
// (/v1/load_lora_adapter in place, the prefix-cache reset, the probe and
// the version) against a full-weight run's push of the same step merged
// into the base (/collective_rpc reload_weights, the same checks). Each
// round pushes one of two steps both ways, the first way alternating from
// round to round, so that neither side always follows the other, after
// one untimed push each way (vLLM's first adapter load sets its LoRA
// buffers up, once a run). It prints, per size,
//
//	lora-sync SIZE: LoRA A bytes, X [lo-hi] s; full B bytes, Y [lo-hi] s; full/LoRA bytes B/A, seconds R [lo-hi]
//
// (medians with their ranges; the seconds' ratio taken round by round,
// internal/benchstat) and reports the ratios as metrics. The bytes are the weight files the
// server reads (adapter_model.safetensors against model.safetensors, both
// float32); the seconds are the whole push as the learner waits for it.
// Sizes: the tiny Qwen3 over the real vocabulary (rank 8) and a model of
// Qwen3-0.6B's shape (rank 64), 5 rounds each; with -short (make
// bench-smoke) the tiny one alone, 2 rounds.
func BenchmarkLoRASyncVsFull(b *testing.B) {
	vllmserver.Python(b)
	sizes := []struct {
		name, config string
		rank         int
	}{{"tiny", hfmodel.TinyQwen3VLLMConfig, 8}}
	rounds := 2
	if !testing.Short() {
		sizes = append(sizes, struct {
			name, config string
			rank         int
		}{"0.6B", qwen3Shape06B, 64})
		rounds = 5
	}
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			b.StopTimer()
			ctx := context.Background()
			tmp := b.TempDir()
			f := newLoRAFixture(b, tmp, size.config)
			var adapters, merged [2]string
			for i := range 2 {
				adapters[i] = filepath.Join(tmp, "run", "step-"+strconv.Itoa(i+1))
				a := f.adapter(b, adapters[i], size.rank, uint64(i+1), int64(i+1))
				merged[i] = filepath.Join(tmp, "merged-"+strconv.Itoa(i+1))
				f.merged(b, merged[i], a)
			}
			f.baseTensors = nil
			b.Setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
			vs := vllmserver.Start(b, f.base, vllmserver.Options{Name: "policy",
				Args: []string{"--enable-lora", "--max-lora-rank", strconv.Itoa(size.rank), "--max-loras", "1"}})
			g, err := weightsync.Open(ctx, "vllm", []string{vs.URL}, weightsync.Options{Timeout: 10 * time.Minute, Adapter: loraAdapterName})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			version := int64(0)
			push := func(dir string) time.Duration {
				version++
				t0 := time.Now()
				if err := g.Push(ctx, weightsync.Checkpoint{Dir: dir, Version: version}); err != nil {
					b.Fatalf("push %s: %v; vLLM's log:\n%s", dir, err, vs.Tail(30))
				}
				return time.Since(t0)
			}
			// One untimed push each way first: vLLM's first adapter load
			// sets its LoRA buffers up (seconds on 2 cores), a cost a run
			// pays once.
			push(adapters[1])
			push(merged[1])
			var lora, full []float64
			b.StartTimer()
			for range b.N {
				for r := range rounds {
					i := r % 2
					if r%2 == 0 {
						lora = append(lora, push(adapters[i]).Seconds())
						full = append(full, push(merged[i]).Seconds())
					} else {
						full = append(full, push(merged[i]).Seconds())
						lora = append(lora, push(adapters[i]).Seconds())
					}
				}
			}
			b.StopTimer()
			lb, fb := weightBytes(b, adapters[0]), weightBytes(b, merged[0])
			ls, fs := benchstat.Of(lora), benchstat.Of(full)
			ratio := benchstat.Of(benchstat.Ratios(full, lora))
			fmt.Printf("lora-sync %s: LoRA %d bytes, %s s; full %d bytes, %s s; full/LoRA bytes %.1f, seconds %s (medians [ranges] of %d rounds, rank %d)\n",
				size.name, lb, ls.Format("%.3f"), fb, fs.Format("%.3f"), float64(fb)/float64(lb), ratio.Format("%.2f"), len(lora), size.rank)
			b.ReportMetric(float64(fb)/float64(lb), "full/lora_bytes")
			b.ReportMetric(ratio.Median, "full/lora_seconds")
			b.ReportMetric(ls.Median, "lora_s_median")
			b.ReportMetric(fs.Median, "full_s_median")
		})
	}
}
