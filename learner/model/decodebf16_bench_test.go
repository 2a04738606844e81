package model

import (
	"fmt"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/benchstat"
)

// qwen3Shape06B is Qwen3-0.6B's configuration (its config.json's shape:
// 28 layers, width 1024, 16 query and 8 key-value heads of 128, MLP 3072,
// vocabulary 151,936, tied head) with random weights rounded to bfloat16,
// as the release stores them.
var qwen3Shape06B = Config{ModelType: "qwen3", HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28,
	NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960,
	RMSNormEps: 1e-6, RopeTheta: 1000000, TieWordEmbeddings: true, HiddenAct: "silu"}

// BenchmarkDecodeDType times decode steps (one new token for each of B
// sequences holding 64 cached positions) in float32 and in bfloat16
// (DecodeBF16) on the same model, alternated, at B = 1 and 32, and reports
// tokens/s of each and the ratio bfloat16/float32, each the median of the
// rounds (one a b.N iteration), the ratio taken round by round. The model is
// Qwen3-0.6B's shape; with -short (make bench-smoke) 4 of its 28 layers
// and a vocabulary of 32,000.
func BenchmarkDecodeDType(b *testing.B) {
	if ok, why := BF16DecodeAvailable(); !ok {
		b.Skipf("no bfloat16 products here: %s", why)
	}
	cfg := qwen3Shape06B
	if testing.Short() {
		cfg.NumHiddenLayers, cfg.VocabSize = 4, 32000
	}
	// Two models of the same bfloat16-exact weights: one decoding in
	// float32, one in bfloat16 alone (DecodeBF16Only), each with its caches.
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	m32, m16 := bf16Copy(b, m), bf16Copy(b, m)
	if err := m16.DecodeBF16Only(); err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i * 7919 % cfg.VocabSize)
	}
	caches := map[*Model][]*KVCache{}
	for _, m := range []*Model{m32, m16} {
		for range 32 {
			c := m.NewKVCache()
			if _, err := m.Extend([]*KVCache{c}, [][]int32{prompt}, nil); err != nil {
				b.Fatal(err)
			}
			caches[m] = append(caches[m], c)
		}
	}
	var lg []float32
	step := func(m *Model, B int) time.Duration {
		toks := make([][]int32, B)
		for i := range toks {
			toks[i] = []int32{int32(i + 1)}
		}
		t0 := time.Now()
		for range 4 {
			var err error
			if lg, err = m.Extend(caches[m][:B], toks, lg); err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(t0) / 4
		for _, c := range caches[m][:B] {
			c.Truncate(64)
		}
		return d
	}
	for _, B := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch%d", B), func(b *testing.B) {
			step(m32, B) // warm up both paths
			step(m16, B)
			// Each iteration is a round: a float32 step, then a bfloat16
			// one; every figure is the median of the rounds, the ratio
			// taken round by round (the log gives the ranges).
			var r32, r16 []float64
			b.ResetTimer()
			for range b.N {
				r32 = append(r32, float64(B)/step(m32, B).Seconds())
				r16 = append(r16, float64(B)/step(m16, B).Seconds())
			}
			ratio := benchstat.Of(benchstat.Ratios(r16, r32))
			b.ReportMetric(benchstat.Median(r32), "f32_tok/s")
			b.ReportMetric(benchstat.Median(r16), "bf16_tok/s")
			b.ReportMetric(ratio.Median, "bf16/f32")
			b.Logf("batch %d, %d rounds: float32 %s tok/s, bfloat16 %s, bfloat16/float32 %s", B, b.N,
				benchstat.Of(r32).Format("%.2f"), benchstat.Of(r16).Format("%.2f"), ratio.Format("%.2f"))
		})
	}
}

// BenchmarkAttendCached times one decode step's attention for one query
// head against P cached positions of Qwen3-0.6B's layout (head size 128,
// 8 key-value heads side by side in a row), the keys and values in float32
// (attendBlock) and in bfloat16 (attendBlockBF16, the bfloat16 KV
// cache's), alternated, and reports each one's time and the ratio.
func BenchmarkAttendCached(b *testing.B) {
	const D, KD = 128, 1024
	for _, P := range []int{512, 4096} {
		b.Run(fmt.Sprintf("positions%d", P), func(b *testing.B) {
			k32, v32 := make([]float32, P*KD), make([]float32, P*KD)
			for i := range k32 {
				k32[i] = float32(i%97)/97 - 0.5
				v32[i] = float32(i%89)/89 - 0.5
			}
			k16, v16 := roundedBF16(k32, KD), roundedBF16(v32, KD)
			q, y, s := make([]float32, D), make([]float32, D), make([]float32, qBlock*P)
			for i := range q {
				q[i] = float32(i%13) / 13
			}
			var lse [1]float32
			one := func(half bool) time.Duration {
				t0 := time.Now()
				for range 64 {
					if half {
						attendBlockBF16(y, D, lse[:], 1, q, D, k16, v16, KD, 1, P-1, D, 0.088, s)
					} else {
						attendBlock(y, D, lse[:], 1, q, D, k32, v32, KD, nil, 0, 1, P-1, D, 0.088, s, false)
					}
				}
				return time.Since(t0) / 64
			}
			one(false)
			one(true)
			var t32, t16 time.Duration
			b.ResetTimer()
			for range b.N {
				t32 += one(false)
				t16 += one(true)
			}
			b.ReportMetric(float64(t32.Microseconds())/float64(b.N), "f32_us")
			b.ReportMetric(float64(t16.Microseconds())/float64(b.N), "bf16_us")
			b.ReportMetric(t32.Seconds()/t16.Seconds(), "f32/bf16")
		})
	}
}
