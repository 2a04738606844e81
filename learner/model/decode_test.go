package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/blas"
)

// Tolerance of cached against full recomputation: both run the same float32
// kernels, but over matrices of other shapes (one row against the whole
// sequence), so the reductions are blocked differently. The largest
// difference observed is 6e-5 (stories260K over 100 greedy steps, logits
// of order 10, i.e. a few float32 ulps); 5e-4 leaves a margin of eight and
// still catches a wrong position, mask or cache row, which moves logits by
// 1e-2 or more.
const tolCached = 5e-4

// peakedModel is a random model whose weights are scaled up so that its
// next-token distributions are far from uniform: greedy decoding then has
// no near-ties that rounding could flip, and the comparison of token
// sequences is meaningful.
func peakedModel(t testing.TB, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if !strings.HasSuffix(p.Name, "norm.weight") {
			for i := range p.Data {
				p.Data[i] *= 8
			}
		}
	}
	return m
}

func argmax(row []float32) int32 {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return int32(best)
}

// maxDiff returns the largest |a-b| and its index.
func maxDiff(a, b []float32) (float64, int) {
	worst, at := 0.0, -1
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > worst || at < 0 {
			worst, at = d, i
		}
	}
	return worst, at
}

// lastLogits is the reference: the whole sequence through Logits, the last row.
func lastLogits(t *testing.T, m *Model, seq []int32) []float32 {
	t.Helper()
	lg, err := m.Logits(Batch{Tokens: seq})
	if err != nil {
		t.Fatal(err)
	}
	V := m.cfg.VocabSize
	return lg[(len(seq)-1)*V:]
}

// checkGreedy decodes steps tokens greedily after prompt with the cache and
// by full recomputation, and requires the same tokens and close logits.
func checkGreedy(t *testing.T, m *Model, prompt []int32, steps int) {
	t.Helper()
	c := m.NewKVCache()
	lg, err := m.Extend([]*KVCache{c}, [][]int32{prompt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq := append([]int32(nil), prompt...)
	for s := 0; s < steps; s++ {
		ref := lastLogits(t, m, seq)
		if d, at := maxDiff(lg, ref); d > tolCached {
			t.Fatalf("step %d (position %d): cached logits differ from full recomputation by %.3g at token %d (%g vs %g)", s, len(seq), d, at, lg[at], ref[at])
		}
		got, want := argmax(lg), argmax(ref)
		if got != want {
			t.Fatalf("step %d: cached greedy token %d, full recomputation %d", s, got, want)
		}
		seq = append(seq, got)
		if lg, err = m.Extend([]*KVCache{c}, [][]int32{{got}}, lg); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != len(seq) {
		t.Fatalf("cache holds %d positions, sequence has %d", c.Len(), len(seq))
	}
	for i, tok := range c.Tokens() {
		if tok != seq[i] {
			t.Fatalf("cache token %d is %d, sequence has %d", i, tok, seq[i])
		}
	}
}

func TestGreedyCachedEqualsRecomputeTiny(t *testing.T) {
	for _, mt := range []string{"qwen2", "llama"} {
		t.Run(mt, func(t *testing.T) {
			cfg := tinyConfig()
			cfg.ModelType = mt
			cfg.TieWordEmbeddings = mt == "qwen2"
			m := peakedModel(t, cfg, 3)
			checkGreedy(t, m, []int32{1, 7, 3, 9, 22, 4, 0}, 80)
		})
	}
}

// TestGreedyCachedEqualsRecomputeBatchVariant decodes with one plain
// product a step (SetBatchInvariantDecode off), alone and beside other
// sequences: the same greedy tokens as full recomputation, and batched
// logits close to those alone.
func TestGreedyCachedEqualsRecomputeBatchVariant(t *testing.T) {
	m := peakedModel(t, tinyConfig(), 3)
	m.SetBatchInvariantDecode(false)
	checkGreedy(t, m, []int32{1, 7, 3, 9, 22, 4, 0}, 40)
	r := rand.New(rand.NewPCG(8, 3))
	V := m.cfg.VocabSize
	var caches []*KVCache
	var toks [][]int32
	for i := 0; i < 13; i++ {
		c := m.NewKVCache()
		if _, err := m.Extend([]*KVCache{c}, [][]int32{{int32(r.IntN(V)), int32(r.IntN(V))}}, nil); err != nil {
			t.Fatal(err)
		}
		caches, toks = append(caches, c), append(toks, []int32{int32(r.IntN(V))})
	}
	lg, err := m.Extend(caches, toks, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range caches {
		c.Truncate(2)
		one, err := m.Extend([]*KVCache{c}, toks[i:i+1], nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, at := maxDiff(lg[i*V:(i+1)*V], one); d > tolCached {
			t.Fatalf("sequence %d: logit %d differs by %.3g between the batch and alone", i, at, d)
		}
	}
}

// TestExtendBatchMatchesSingle feeds sequences at different lengths, some
// with one token and some with a prefill longer than a query block, in one
// batch, and compares each with the same sequence fed alone.
func TestExtendBatchMatchesSingle(t *testing.T) {
	m := peakedModel(t, tinyConfig(), 5)
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(r.IntN(m.cfg.VocabSize))
		}
		return s
	}
	prior := []int{0, 3, 17, 0, 70}
	fresh := []int{5, 1, 1, 130, 2}
	var batch, single []*KVCache
	var toks [][]int32
	for i := range prior {
		b, s := m.NewKVCache(), m.NewKVCache()
		if prior[i] > 0 {
			p := rnd(prior[i])
			for _, c := range []*KVCache{b, s} {
				if _, err := m.Extend([]*KVCache{c}, [][]int32{p}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		batch, single = append(batch, b), append(single, s)
		toks = append(toks, rnd(fresh[i]))
	}
	lg, err := m.Extend(batch, toks, nil)
	if err != nil {
		t.Fatal(err)
	}
	V := m.cfg.VocabSize
	for i := range single {
		one, err := m.Extend(single[i:i+1], toks[i:i+1], nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, at := maxDiff(lg[i*V:(i+1)*V], one); d > tolCached {
			t.Errorf("sequence %d (%d cached + %d new): batched logits differ from single by %.3g at token %d", i, prior[i], fresh[i], d, at)
		}
		ref := lastLogits(t, m, batch[i].Tokens())
		if d, at := maxDiff(one, ref); d > tolCached {
			t.Errorf("sequence %d: cached logits differ from full recomputation by %.3g at token %d", i, d, at)
		}
	}
}

// TestContinuationEqualsScratch: prefill, generate, append external tokens,
// generate again; the logits equal those of a cache filled from scratch
// with the concatenation.
func TestContinuationEqualsScratch(t *testing.T) {
	m := peakedModel(t, tinyConfig(), 9)
	c := m.NewKVCache()
	lg, err := m.Extend([]*KVCache{c}, [][]int32{{2, 4, 6, 8}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if lg, err = m.Extend([]*KVCache{c}, [][]int32{{argmax(lg)}}, lg); err != nil {
			t.Fatal(err)
		}
	}
	external := []int32{11, 12, 13, 14, 15, 16, 17}
	cont, err := m.Extend([]*KVCache{c}, [][]int32{external}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scratch := m.NewKVCache()
	whole, err := m.Extend([]*KVCache{scratch}, [][]int32{append([]int32(nil), c.Tokens()...)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, at := maxDiff(cont, whole); d > tolCached {
		t.Fatalf("continuation logits differ from a prefill of the concatenation by %.3g at token %d", d, at)
	}
	// Truncating back to the prefix and feeding other tokens is exact too.
	c.Truncate(4)
	again, err := m.Extend([]*KVCache{c}, [][]int32{{30, 31}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, at := maxDiff(again, lastLogits(t, m, []int32{2, 4, 6, 8, 30, 31})); d > tolCached {
		t.Fatalf("after Truncate(4), logits differ from recomputation by %.3g at token %d", d, at)
	}
}

func TestExtendErrors(t *testing.T) {
	m := peakedModel(t, tinyConfig(), 1)
	other, err := New(Config{ModelType: "llama", HiddenSize: 16, IntermediateSize: 8, NumHiddenLayers: 1, NumAttentionHeads: 2,
		NumKeyValueHeads: 2, VocabSize: 50, MaxPositionEmbeddings: 8, RMSNormEps: 1e-6, RopeTheta: 1e4, HiddenAct: "silu"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewKVCache()
	cases := []struct {
		caches []*KVCache
		toks   [][]int32
		want   string
	}{
		{nil, nil, "one non-empty list per cache"},
		{[]*KVCache{c}, [][]int32{{}}, "no new tokens"},
		{[]*KVCache{c}, [][]int32{{50}}, "outside the vocabulary"},
		{[]*KVCache{c, c}, [][]int32{{1}, {2}}, "twice"},
		{[]*KVCache{other.NewKVCache()}, [][]int32{{1}}, "another shape"},
		{[]*KVCache{c}, [][]int32{make([]int32, 201)}, "max_position_embeddings"},
	}
	for _, tc := range cases {
		if _, err := m.Extend(tc.caches, tc.toks, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Extend error = %v, want one mentioning %q", err, tc.want)
		}
	}
	if c.Len() != 0 {
		t.Errorf("failed Extend calls left %d positions in the cache", c.Len())
	}
}

// TestExtendBitwiseIndependentOfBatch: a sequence's logits are the same
// bits whether it is decoded alone or among 31 others at other lengths, on
// the tiny model (TestExtendBitwiseIndependentOfBatchStories260K: on
// stories260K; shapes on both sides of OpenBLAS's small-matrix threshold).
// Seeded sampling relies on this.
func TestExtendBitwiseIndependentOfBatch(t *testing.T) {
	checkExtendBitwise(t, peakedModel(t, tinyConfig(), 11))
}

// checkExtendBitwise decodes batches of 2 to 32 sequences at random
// lengths on m and checks the last sequence's logits bit for bit against
// it decoded alone.
func checkExtendBitwise(t *testing.T, m *Model) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	V := m.cfg.VocabSize
	for _, B := range []int{2, 5, 19, 32} {
		var batch []*KVCache
		var toks [][]int32
		for i := 0; i < B; i++ {
			c := m.NewKVCache()
			p := make([]int32, 1+r.IntN(40))
			for j := range p {
				p[j] = int32(r.IntN(V))
			}
			if _, err := m.Extend([]*KVCache{c}, [][]int32{p}, nil); err != nil {
				t.Fatal(err)
			}
			batch = append(batch, c)
			toks = append(toks, []int32{int32(r.IntN(V))})
		}
		alone := m.NewKVCache()
		if _, err := m.Extend([]*KVCache{alone}, [][]int32{append([]int32(nil), batch[B-1].Tokens()...)}, nil); err != nil {
			t.Fatal(err)
		}
		lg, err := m.Extend(batch, toks, nil)
		if err != nil {
			t.Fatal(err)
		}
		one, err := m.Extend([]*KVCache{alone}, toks[B-1:], nil)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range one {
			if got := lg[(B-1)*V+j]; got != v {
				t.Fatalf("batch of %d: logit %d of the last sequence is %v in the batch and %v alone", B, j, got, v)
			}
		}
	}
}

// TestStepLinearIndependentOfBatch checks blas.RowDots, where this CPU
// runs it, and the layout decodeLayout picked for this process's BLAS
// kernels (the way of CPUs without it) on every batch size a serving engine runs by
// default (1 to 64), on a projection of a model of width 1024 and on the
// tiny served model's: each row of a step is bit for bit the row computed
// alone, and close to the plain product's.
func TestStepLinearIndependentOfBatch(t *testing.T) {
	ways := []bool{false}
	if decodeRowDots {
		ways = append(ways, true)
		defer func() { decodeRowDots = true }()
	}
	for _, dots := range ways {
		decodeRowDots = dots
		if dots {
			t.Logf("blas.RowDots (%s)", blas.RowDotsKernel())
		} else {
			t.Logf("layout %+v", decodeLayout())
		}
		stepLinearIndependentOfBatch(t)
	}
}

func stepLinearIndependentOfBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 1))
	for _, sh := range [][2]int{{1024, 3072}, {64, 128}, {128, 64}, {32, 50}} {
		I, O := sh[0], sh[1]
		wt, bias, in := make([]float32, O*I), make([]float32, O), make([]float32, 64*I)
		for _, x := range [][]float32{wt, bias, in} {
			for i := range x {
				x[i] = r.Float32() - 0.5
			}
		}
		var w stepWork
		alone, plain := make([]float32, 64*O), make([]float32, 64*O)
		linearForward(plain, in, wt, bias, 64, I, O)
		for row := range 64 {
			w.linear(alone[row*O:(row+1)*O], in[row*I:(row+1)*I], wt, bias, 1, I, O)
		}
		if d, at := maxDiff(alone, plain); d > 1e-4 {
			t.Fatalf("%dx%d: a row alone differs from the plain product by %.3g at %d", I, O, d, at)
		}
		out := make([]float32, 64*O)
		for n := 1; n <= 64; n++ {
			w.linear(out, in, wt, bias, n, I, O)
			for i := range n * O {
				if out[i] != alone[i] {
					t.Fatalf("%dx%d, %d rows: row %d column %d is %v, alone %v", I, O, n, i/O, i%O, out[i], alone[i])
				}
			}
		}
	}
}
