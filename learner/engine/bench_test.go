package engine

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// benchModels are the demonstration model (3 layers, hidden 128, 4 heads,
// the built-in vocabulary: 0.63M parameters) and a 25M-parameter model
// (the learner's training benchmark size).
var benchModels = []struct {
	name string
	cfg  model.Config
}{
	{"demo", model.Config{ModelType: "llama", HiddenSize: 128, IntermediateSize: 344, NumHiddenLayers: 3, NumAttentionHeads: 4,
		NumKeyValueHeads: 4, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-5,
		RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}},
	{"25M", model.Config{ModelType: "qwen2", HiddenSize: 512, IntermediateSize: 1376, NumHiddenLayers: 7, NumAttentionHeads: 8,
		NumKeyValueHeads: 4, VocabSize: 8192, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}},
}

// benchSizes are the benchModels a benchmark runs, and the repetitions of
// each measurement: all of them, or with -short (make bench-smoke) the
// demonstration model alone, measured once.
func benchSizes(reps int) ([]struct {
	name string
	cfg  model.Config
}, int) {
	if testing.Short() {
		return benchModels[:1], 1
	}
	return benchModels, reps
}

func benchEngine(b *testing.B, cfg model.Config) (*Engine, *model.Model) {
	b.Helper()
	m, err := model.New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(m, nil, 1, Config{EOS: []int32{}, MaxBatch: 32})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e, m
}

func randomTokens(r *rand.Rand, n, V int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(V))
	}
	return out
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// decodeRate runs batch concurrent requests of 8 prompt tokens and newTok
// sampled tokens (temperature 1, as rollouts sample) and returns sampled
// tokens per second of wall time: decode throughput with a small prefill
// share.
func decodeRate(b *testing.B, e *Engine, V, batch, newTok int, seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 0))
	reqs := make([]Request, batch)
	for i := range reqs {
		reqs[i] = Request{Prefix: randomTokens(r, 8, V), Params: sampling.Params{Temperature: 1, MaxTokens: newTok, Seed: int64(i)}}
	}
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Generate(context.Background(), reqs[i]); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	return float64(batch*newTok) / time.Since(t0).Seconds()
}

// BenchmarkDecode reports sampled tokens/s through the engine at batch 1
// and batch 32, measured side by side, and their ratio (target >= 4), plus
// the time to first token of an idle engine for a 128-token prompt.
func BenchmarkDecode(b *testing.B) {
	models, reps := benchSizes(3)
	for _, bm := range models {
		b.Run(bm.name, func(b *testing.B) {
			e, m := benchEngine(b, bm.cfg)
			V := bm.cfg.VocabSize
			b.ReportMetric(float64(m.NumParams())/1e6, "Mparams")
			decodeRate(b, e, V, 4, 8, 99) // warm up buffers
			var one, many, ttft []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for rep := 0; rep < reps; rep++ {
					one = append(one, decodeRate(b, e, V, 1, 64, uint64(rep)))
					many = append(many, decodeRate(b, e, V, 32, 64, uint64(rep)))
					r := rand.New(rand.NewPCG(uint64(rep), 1))
					t0 := time.Now()
					if _, err := e.Generate(context.Background(), Request{Prefix: randomTokens(r, 128, V), Params: sampling.Params{MaxTokens: 1}}); err != nil {
						b.Fatal(err)
					}
					ttft = append(ttft, time.Since(t0).Seconds()*1e3)
				}
			}
			b1, b32 := median(one), median(many)
			b.ReportMetric(b1, "tok/s_b1")
			b.ReportMetric(b32, "tok/s_b32")
			b.ReportMetric(b32/b1, "ratio_b32/b1")
			b.ReportMetric(median(ttft), "ttft128_ms")
		})
	}
}

// BenchmarkContinuation reports the cost of continuing a session after 50
// external tokens (the previous output's last token and 49 collaborator
// tokens) following a 500-token prefix, as a ratio to prefilling the whole
// sequence without a cache (target <= 0.25), measured side by side. Each
// request samples one token, so the times are prefill times.
func BenchmarkContinuation(b *testing.B) {
	models, reps := benchSizes(5)
	for _, bm := range models {
		b.Run(bm.name, func(b *testing.B) {
			e, _ := benchEngine(b, bm.cfg)
			V := bm.cfg.VocabSize
			ctx := context.Background()
			r := rand.New(rand.NewPCG(7, 7))
			var cont, full500, full550 []float64
			timed := func(req Request) (Result, float64) {
				t0 := time.Now()
				res, err := e.Generate(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				return res, time.Since(t0).Seconds() * 1e3
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for rep := 0; rep < reps; rep++ {
					prefix := randomTokens(r, 500, V)
					first, t500 := timed(Request{Prefix: prefix, Session: "bench", Params: sampling.Params{MaxTokens: 1}})
					whole := append(append(append([]int32(nil), prefix...), first.Tokens...), randomTokens(r, 49, V)...)
					res, tc := timed(Request{Prefix: whole, Session: "bench", Params: sampling.Params{MaxTokens: 1}})
					if res.CachedTokens != 500 {
						b.Fatalf("continuation reused %d tokens, want 500", res.CachedTokens)
					}
					_, t550 := timed(Request{Prefix: whole, Params: sampling.Params{MaxTokens: 1}})
					e.Release("bench")
					cont, full500, full550 = append(cont, tc), append(full500, t500), append(full550, t550)
				}
			}
			c, p500, p550 := median(cont), median(full500), median(full550)
			b.ReportMetric(c, "cont50_ms")
			b.ReportMetric(p500, "prefill500_ms")
			b.ReportMetric(c/p500, "ratio_cont/prefill500")
			b.ReportMetric(c/p550, "ratio_cont/prefill550")
		})
	}
}
