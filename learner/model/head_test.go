package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// The tiled head (logits a tile of rows by a slice of the vocabulary at a
// time, kept or recomputed by the backward pass) gives the log-probabilities,
// entropies and gradients of the head that keeps the whole [M,V] block,
// within float32 rounding, and the same bits at every thread count.
func TestHeadTilesAgreeWithWholeHead(t *testing.T) {
	cfg := tinyConfig()
	cfg.VocabSize = 1000 // not a multiple of any slice width below: a narrower last slice
	r := rand.New(rand.NewPCG(7, 8))
	b := randomBatch(r, cfg.VocabSize, 70, 1, 45)
	M := len(b.Tokens) - len(b.SeqLens) // the rows with a target
	w := make([]float32, len(b.Tokens))
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	defer func(k, c, s int) { keepLogitsFloats, chunkFloats, minSliceCols = k, c, s }(keepLogitsFloats, chunkFloats, minSliceCols)
	keepLogitsFloats = M * cfg.VocabSize
	lp0, ent0, g0 := passGrads(t, cfg, b, w, false)
	for _, v := range []struct {
		name                  string
		chunk, minSlice, keep int
		wantRows, wantCo      int
	}{
		{"slices of every row", M * 256, 64, 0, M, 256},
		{"rows and slices", 20 * 128, 128, 0, 20, 128},
		{"rows and slices, the first three kept", 20 * 128, 128, 3 * 20 * 128, 20, 128},
		{"rows of the whole vocabulary", 7 * cfg.VocabSize, 1024, 0, 7, cfg.VocabSize},
	} {
		t.Run(v.name, func(t *testing.T) {
			chunkFloats, minSliceCols, keepLogitsFloats = v.chunk, v.minSlice, v.keep
			if _, kept, _ := headTiles(M, cfg.VocabSize, vocabBlockRows(dimsOf(cfg)), v.keep); kept != v.keep {
				t.Fatalf("headTiles kept %d floats, want %d", kept, v.keep)
			}
			if rows, cols, _ := headTile(M, cfg.VocabSize, vocabBlockRows(dimsOf(cfg))); rows != v.wantRows || cols != v.wantCo {
				t.Fatalf("headTile(%d, %d) = %d rows x %d columns, want %d x %d", M, cfg.VocabSize, rows, cols, v.wantRows, v.wantCo)
			}
			lp, ent, g := passGrads(t, cfg, b, w, false)
			// The slices' exponentials are taken at their own maximum
			// and rescaled in float64 (the whole row's at the row's
			// maximum): a few float32 roundings of values near log(1000)
			// = 6.9, so 1e-5 absolute is some 20 ulps of margin.
			for i := range lp0 {
				if d := math.Max(math.Abs(float64(lp[i]-lp0[i])), math.Abs(float64(ent[i]-ent0[i]))); d > 1e-5 {
					t.Fatalf("token %d: log-prob %v entropy %v tiled, %v %v whole", i, lp[i], ent[i], lp0[i], ent0[i])
				}
			}
			// The head's input gradient sums the slices' products in
			// slice order (the whole head: one product over 1,000
			// columns), and the softmax feeding both differs by the
			// rounding above: float32 sums of up to 1,000 terms, well
			// within 1e-5 of each tensor's scale.
			for k := range g0 {
				if rel := relToScale(g[k], g0[k]); rel > 1e-5 {
					t.Errorf("gradient %d: %.3g of its scale from the whole head's", k, rel)
				}
			}
			// The tiling depends on M and V alone: one thread and three
			// give the same bits in what the head computes (the layers'
			// norm gradients sum per-thread partials, so not those).
			for _, procs := range []int{1, 3} {
				prev := runtime.GOMAXPROCS(procs)
				lpN, entN, gN := passGrads(t, cfg, b, w, false)
				runtime.GOMAXPROCS(prev)
				if i, ok := sameBits(lpN, lp); !ok {
					t.Fatalf("GOMAXPROCS %d: log-prob %d is %v, %v at %d", procs, i, lpN[i], lp[i], prev)
				}
				if i, ok := sameBits(entN, ent); !ok {
					t.Fatalf("GOMAXPROCS %d: entropy %d is %v, %v at %d", procs, i, entN[i], ent[i], prev)
				}
				if i, ok := sameBits(gN[0], g[0]); !ok { // the tied embedding and head
					t.Fatalf("GOMAXPROCS %d: the head's gradient element %d is %v, %v at %d", procs, i, gN[0][i], g[0][i], prev)
				}
			}
		})
	}
}

// With one slice a row's log-sum-exp and entropy are logSoftmax's bit for
// bit, and combining slices is exact where the arithmetic is: slices of
// equal maxima sum their shifted sums unscaled.
func TestCombineSums(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 777)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 4)
	}
	lse, ent := logSoftmax(append([]float32(nil), x...))
	l1, e1 := combineSums([]shiftedSums{sumsOf(append([]float32(nil), x...), false)})
	if math.Float32bits(l1) != math.Float32bits(lse) || math.Float32bits(e1) != math.Float32bits(ent) {
		t.Fatalf("one slice: lse %v entropy %v, logSoftmax %v %v", l1, e1, lse, ent)
	}
	var parts []shiftedSums
	for s := 0; s < len(x); s += 100 {
		parts = append(parts, sumsOf(append([]float32(nil), x[s:min(s+100, len(x))]...), false))
	}
	l8, e8 := combineSums(parts)
	// float64 combination of float32 block sums: the 8 slices' own
	// roundings, relative 1e-6 of lse (about 10 here) and of the entropy.
	if math.Abs(float64(l8-lse)) > 1e-5 || math.Abs(float64(e8-ent)) > 1e-5 {
		t.Fatalf("8 slices: lse %v entropy %v, whole row %v %v", l8, e8, lse, ent)
	}
}
