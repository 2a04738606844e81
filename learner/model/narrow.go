package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/aipo-rl/aipo/learner/blas"
)

// A model that only scores (the frozen reference of the KL term) may hold
// its weight matrices in bfloat16 when every one of their values is a
// bfloat16 value, as it is for a model loaded from a bfloat16 checkpoint
// (the Hugging Face releases of Qwen2.5, Qwen3 and Llama 3 are bfloat16;
// checkpoint 0 of a run seeded from one keeps those values): 2 bytes a
// parameter instead of 4, and the same log-probabilities bit for bit,
// because widening a bfloat16 value to float32 is exact and the passes
// multiply the very float32 values they multiplied before. A pass widens
// each matrix just before it multiplies with it, a slice of at most
// narrowSliceFloats floats at a time, so what it holds beyond the
// bfloat16 weights is one such slice.

// errNarrow is the error of a pass that a bfloat16-held model cannot run.
var errNarrow = errors.New("model: the weights are held in bfloat16 for scoring alone (a frozen reference): only Score runs on this model")

// narrowSliceFloats bounds the float32 copy of a bfloat16-held matrix that
// exists at once (1M floats, 4 MiB); a variable so that tests can force
// many slices.
var narrowSliceFloats = 1 << 20

// narrowWeights are the bfloat16 matrices of a model held in bfloat16;
// the norms and biases stay float32 in the model's weights.
type narrowWeights struct {
	emb, head []uint16 // [V, C]; head aliases emb when tied
	layers    []narrowLayer
}

type narrowLayer = projections[[]uint16]

// projections are a layer's four weight matrices held in some form (the
// bfloat16 values of a scoring model, the packed matrices of bfloat16
// decoding).
type projections[T any] struct{ qkv, o, gateUp, down T }

// at is projection w.
func (p *projections[T]) at(w Weight) *T {
	switch w {
	case WQKV:
		return &p.qkv
	case WO:
		return &p.o
	case WGateUp:
		return &p.gateUp
	case WDown:
		return &p.down
	}
	panic("model: a linear op was given a weight that is not a projection")
}

// projectionWeights are the Weights of a layer's projections.
var projectionWeights = [...]Weight{WQKV, WO, WGateUp, WDown}

// matrix is projection w of layer l.
func (n *narrowWeights) matrix(l int, w Weight) []uint16 { return *n.layers[l].at(w) }

// HoldBF16 makes m hold its weight matrices (embeddings, projections, LM
// head) in bfloat16 when every value in them is exactly a bfloat16 value,
// and reports whether it did; otherwise m is left as it was. A model so
// held scores (Score) as before, bit for bit, in half the memory, and runs
// nothing else: Forward, Logits, Extend, Params and the optimiser's views
// are for models that train or serve. Call it on a model that will only be
// scored, before its first pass.
//
// It also declines on BLAS kernels that compute a column of a product
// differently when the product is cut into column slices (OpenBLAS
// 0.3.21's Haswell and Zen kernels do; see columnSlicesExact): held, the
// model would score in the last bits otherwise than in float32.
func (m *Model) HoldBF16() bool {
	if m.narrow == nil && !columnSlicesExact() {
		return false
	}
	return m.holdBF16()
}

// holdBF16 is HoldBF16 whatever the kernels.
func (m *Model) holdBF16() bool { return m.hold(false) }

// HoldBF16Rounded makes a model that will only be scored, and whose
// products are bfloat16 (SetComputeBF16(true): the frozen reference of a
// learner.precision bf16 run), hold its weight matrices (embeddings,
// projections, LM head) rounded to the nearest bfloat16 (ties to even),
// whatever their values: half the memory. Its products read the very
// operands they read before, since a bfloat16 product rounds its weights
// as it reads them, in the same slices (productHalvesWT, narrowMatmul);
// what differs is the embedding's rows, which a float32-held model looks
// up unrounded: each value within 2^-9 of itself, relative. It reports
// false, and leaves m as it was, for a model that trains (has gradients),
// decodes alone, or does not multiply in bfloat16. Norms and biases stay
// float32.
func (m *Model) HoldBF16Rounded() bool {
	if !m.computeBF16 {
		return false
	}
	return m.hold(true)
}

// hold holds m's matrices in bfloat16: their values as they are (round
// false: only when every one is a bfloat16 value) or rounded.
func (m *Model) hold(round bool) bool {
	if m.narrow != nil {
		return true
	}
	if m.decodeOnly() || m.shard != nil {
		return false
	}
	if m.g.flat != nil {
		return false // a model with gradients trains
	}
	w := &m.w
	mats := [][]float32{w.emb}
	if !m.cfg.TieWordEmbeddings {
		mats = append(mats, w.head)
	}
	for _, lw := range w.layers {
		mats = append(mats, lw.qkv, lw.o, lw.gateUp, lw.down)
	}
	if !round {
		for _, x := range mats {
			if !bf16Exact(x) {
				return false
			}
		}
	}
	conv := narrowed
	if round {
		conv = rounded
	}
	n := &narrowWeights{emb: conv(w.emb)}
	n.head = n.emb
	if !m.cfg.TieWordEmbeddings {
		n.head = conv(w.head)
	}
	for _, lw := range w.layers {
		n.layers = append(n.layers, narrowLayer{qkv: conv(lw.qkv), o: conv(lw.o), gateUp: conv(lw.gateUp), down: conv(lw.down)})
	}
	m.w, m.narrow = w.normsAndBiases(), n
	return true
}

// rounded is the bfloat16 nearest each value of src (ties to even), as a
// bfloat16 product rounds its operands.
func rounded(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	roundHalves(dst, src)
	return dst
}

// normsAndBiases is a copy of w's norms and biases alone: the float32
// weights a model keeps once its matrices are held otherwise (HoldBF16,
// DecodeBF16Only), copied out so that the flat buffer can go.
func (w *weights) normsAndBiases() weights {
	kept := weights{norm: slices.Clone(w.norm)}
	for _, lw := range w.layers {
		kept.layers = append(kept.layers, layerWeights{inNorm: slices.Clone(lw.inNorm), postNorm: slices.Clone(lw.postNorm),
			qkvBias: slices.Clone(lw.qkvBias), oBias: slices.Clone(lw.oBias), qkNorm: slices.Clone(lw.qkNorm)})
	}
	return kept
}

// HeldInBF16 reports whether HoldBF16 made m hold its matrices in bfloat16.
func (m *Model) HeldInBF16() bool { return m.narrow != nil }

// bf16Exact reports whether every value of x is a bfloat16 value (its low
// 16 bits are zero).
func bf16Exact(x []float32) bool {
	for _, v := range x {
		if math.Float32bits(v)&0xffff != 0 {
			return false
		}
	}
	return true
}

// narrowed is the (bfloat16-exact) values of src as bfloat16.
func narrowed(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	parallelFor(len(src), 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = uint16(math.Float32bits(src[i]) >> 16)
		}
	})
	return dst
}

// widen writes the float32 values of the bfloat16 src into dst.
func widen(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// narrowSliceRows is how many rows of width cols one widened slice holds:
// a multiple of sliceAlign. The slices' products are the whole product's
// bit for bit only because the multiply computes each column of its result
// the same way whatever the columns beside it: the pure-Go kernel always
// does; OpenBLAS 0.3.21's SkylakeX kernels do for column blocks 32 wide or
// wider and not for 16 (its small-matrix kernels take other paths); its
// Haswell and Zen kernels do not, and there HoldBF16 declines
// (columnSlicesExact probes the kernels in use).
func narrowSliceRows(cols int) int {
	return max(sliceAlign, narrowSliceFloats/cols/sliceAlign*sliceAlign)
}

const sliceAlign = 64

// narrowMatmul is out[N,O] = in[N,I]·W[O,I]^T for a bfloat16 W: the rows of
// W widened a slice at a time into a buffer of mem, each slice's columns
// of out computed by the same multiply as the float32 weights'.
func narrowMatmul(out, in []float32, w []uint16, N, I, O int, mem *arena) {
	rows := min(narrowSliceRows(I), O)
	buf := mem.get(rows * I)
	for o0 := 0; o0 < O; o0 += rows {
		n := min(rows, O-o0)
		s := buf[:n*I]
		parallelFor(n, 64, func(lo, hi int) { widen(s[lo*I:hi*I], w[(o0+lo)*I:(o0+hi)*I]) })
		blas.Sgemm(false, true, N, n, I, 1, in, I, s, I, 0, out[o0:], O)
	}
	mem.put(buf)
}

// narrowEmbed gathers the rows of the bfloat16 embedding, widened.
func narrowEmbed(out []float32, tokens []int32, emb []uint16, C int) {
	parallelFor(len(tokens), 256, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			r := int(tokens[t]) * C
			widen(out[t*C:(t+1)*C], emb[r:r+C])
		}
	})
}

// HoldsBF16Exactly reports whether HoldBF16 holds bfloat16-exact models on
// this process's BLAS kernels (where it does not, they stay float32).
func HoldsBF16Exactly() bool { return columnSlicesExact() }

// columnSlicesExact reports whether this process's BLAS kernels compute
// the columns of a product cut into slices of sliceAlign-multiple widths
// (as narrowMatmul cuts it) bit for bit as the whole product's. It is
// probed once, on random products of a few shapes with the rows of a
// scoring micro-batch (above OpenBLAS's small-matrix sizes, whose kernels
// no scoring pass of a real model meets), slices of 1 and 3 times
// sliceAlign columns with a remainder.
var columnSlicesExact = sync.OnceValue(func() bool {
	r := rand.New(rand.NewPCG(9, 2))
	for _, sh := range [][3]int{{64, 128, 1000}, {200, 64, 700}} {
		N, I, O := sh[0], sh[1], sh[2]
		in, w := make([]float32, N*I), make([]float32, O*I)
		for i := range in {
			in[i] = r.Float32() - 0.5
		}
		for i := range w {
			w[i] = r.Float32() - 0.5
		}
		whole, cut := make([]float32, N*O), make([]float32, N*O)
		blas.Sgemm(false, true, N, O, I, 1, in, I, w, I, 0, whole, O)
		for _, width := range []int{sliceAlign, 3 * sliceAlign} {
			for o0 := 0; o0 < O; o0 += width {
				n := min(width, O-o0)
				blas.Sgemm(false, true, N, n, I, 1, in, I, w[o0*I:], I, 0, cut[o0:], O)
			}
			for i := range whole {
				if math.Float32bits(whole[i]) != math.Float32bits(cut[i]) {
					return false
				}
			}
		}
	}
	return true
})
