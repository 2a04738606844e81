package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/blas"
)

// bf16Decode is a model's projections and LM head packed in bfloat16 for
// Extend (DecodeBF16).
type bf16Decode struct {
	layers []bf16Layer
	head   *blas.BF16Matrix
	// emb is the embedding in bfloat16 once DecodeBF16Only dropped the
	// float32 weights (nil before).
	emb []uint16
}

// errDecodeOnly is the error of a pass on a model that DecodeBF16Only
// left with its bfloat16 decoding weights alone.
var errDecodeOnly = errors.New("model: the model keeps its bfloat16 decoding weights alone (DecodeBF16Only): only Extend runs on it")

type bf16Layer = projections[*blas.BF16Matrix]

func (b *bf16Decode) matrix(l int, w Weight) *blas.BF16Matrix { return *b.layers[l].at(w) }

func (b *bf16Decode) describe() string {
	return "bfloat16 products (" + blas.BF16MatrixKernel() + "), weights, each product's rows and the KV cache in bfloat16, float32 accumulation, norms and attention; batch-invariant"
}

// BF16DecodeAvailable reports whether DecodeBF16 can turn bfloat16
// decoding on in this process (see blas.BF16MatrixAvailable), and if not,
// why; where it can, the string names the kernel.
func BF16DecodeAvailable() (bool, string) {
	return blas.BF16MatrixAvailable(), blas.BF16MatrixKernel()
}

// DecodeBF16 chooses the precision of Extend's matrix products. On, the
// four projections of every layer and the LM head are packed now, in
// bfloat16, and every product rounds its input rows to bfloat16 and
// accumulates in float32 on the CPU's bfloat16 instructions (AMX or
// AVX512-BF16, through oneDNN), or, on a CPU without them, by
// blas.RowDotsBF16 (AVX2 and FMA, or AVX-512), each weight widened exactly
// as it is loaded: the weights a bfloat16 checkpoint holds,
// multiplied as vLLM and PyTorch multiply them in bfloat16, in half the
// bytes a step reads. The KV caches made from then on (NewKVCache) hold
// keys and values in bfloat16, rounded as they enter (half the bytes a
// cached position takes, as vLLM's cache in a bfloat16 model's dtype),
// and attention multiplies them widened, in float32. Embeddings, norms,
// biases, the residual stream and the logits stay float32. Logits then
// differ from the float32 path by the rounding of the products' inputs
// and of the cached keys and values (each at most 2⁻⁸ of what it rounds;
// see TestDecodeBF16Tolerance), and are the same bits whatever other
// sequences share a step. Off (the default) drops the packed copy; caches
// made before a switch are refused after it.
//
// The packed copy is of the weights as they are when it is called: a
// model whose weights change afterwards (a training step) decodes the
// old ones until DecodeBF16 is called again. The float32 weights stay, for
// Forward and Score. It fails where BF16DecodeAvailable is false, on a
// model held in bfloat16 for scoring (HoldBF16), and leaves the model as
// it was.
func (m *Model) DecodeBF16(on bool) error {
	if m.bf16 != nil && m.bf16.emb != nil {
		if on {
			return nil
		}
		return errDecodeOnly
	}
	if !on {
		m.bf16 = nil
		return nil
	}
	if m.narrow != nil {
		return errNarrow
	}
	if ok, why := BF16DecodeAvailable(); !ok {
		return fmt.Errorf("model: bfloat16 decoding needs bfloat16 products (oneDNN's AMX or AVX512-BF16 kernels, or AVX2 and FMA): %s; decode in float32", why)
	}
	d := m.d
	pack := func(w []float32, O, I int) (*blas.BF16Matrix, error) {
		return blas.PackBF16(roundedBF16(w, I), O, I)
	}
	ops := &cpuOps{m: m}
	b := &bf16Decode{layers: make([]bf16Layer, d.L)}
	var err error
	for l := range m.w.layers {
		for _, w := range projectionWeights {
			wt, _, I, O := ops.linear(&m.w, l, w)
			if *b.layers[l].at(w), err = pack(wt, O, I); err != nil {
				return fmt.Errorf("model: packing layer %d in bfloat16: %w", l, err)
			}
		}
	}
	if b.head, err = pack(m.w.head, d.V, d.C); err != nil {
		return fmt.Errorf("model: packing the LM head in bfloat16: %w", err)
	}
	m.bf16 = b
	return nil
}

// DecodeBF16Only is DecodeBF16(true) for a model that will only decode
// (aipo serve's, aipo train's own engine's): it then drops the float32
// weights, keeping the norms and biases in float32 and the embedding in
// bfloat16 (each row widened as a token is embedded), so that the model
// holds about 2 bytes a parameter, as the bfloat16 checkpoint does,
// instead of 6. Afterwards only Extend runs: Forward, Logits, Score,
// Params, HoldBF16 and DecodeBF16(false) refuse, naming this.
func (m *Model) DecodeBF16Only() error {
	if err := m.DecodeBF16(true); err != nil {
		return err
	}
	if m.bf16.emb != nil {
		return nil
	}
	m.bf16.emb = roundedBF16(m.w.emb, m.d.C)
	m.w, m.g = m.w.normsAndBiases(), weights{}
	return nil
}

// DecodeBF16OnlyBytes is what a model of cfg holds for its weights after
// DecodeBF16Only: the norms and biases in float32, every other tensor in
// bfloat16, and with tied embeddings the head's packed copy beside the
// bfloat16 embedding (oneDNN's packing of the products' weights may pad
// them a little beyond this).
func DecodeBF16OnlyBytes(cfg Config) int64 {
	sp := SpansOf(cfg)
	f32 := int64(sp.Norm.Len)
	for _, ls := range sp.Layers {
		f32 += int64(ls.InNorm.Len + ls.PostNorm.Len + ls.QKVBias.Len + ls.OBias.Len + ls.QKNorm.Len)
	}
	half := ParamCount(cfg) - f32
	if cfg.TieWordEmbeddings {
		half += int64(sp.Head.Len)
	}
	return 4*f32 + 2*half
}

// BF16LogitBound bounds how far decoding in bfloat16 (DecodeBF16, or a
// device's bfloat16 decoder: learner/cuda's) may move a logit of m from
// the float32 path's, for m's weights already bfloat16 values (a model
// loaded from a bfloat16 checkpoint): the tolerance the tests of every
// bfloat16 decoder hold it to. Rounding a product's input to bfloat16
// (8 significant bits, to nearest: unit roundoff 2⁻⁸) moves each
// element by at most 2⁻⁸ of itself, so the product's output by at most
// 2⁻⁸·Σ|x·w| (the float32 accumulation adds ~k·2⁻²⁴ of the same, which
// is negligible beside it). A pass has 4L+1 products in sequence, and the
// KV cache rounds two more results a layer (the keys and values, each by
// at most 2⁻⁸ of itself, which attention's products carry on as they
// carry a rounded input): 6L+1 roundings, each one's change carried on to
// the logits by the residual stream. The head's Σ|x·w| is at most
// ‖x‖₂·‖w_j‖₂ (Cauchy-Schwarz), with ‖x‖₂ ≤ √C·max|g| after the final
// RMSNorm of weight g. The bound is 6L+1 such changes of the head, times
// 4 for the growth through the later layers' norms and attention (the
// test models have 2 layers).
func BF16LogitBound(m *Model) float64 {
	d := m.d
	var g float64
	for _, v := range m.w.norm {
		g = max(g, math.Abs(float64(v)))
	}
	var wmax float64
	for j := range d.V {
		var s float64
		for _, v := range m.w.head[j*d.C : (j+1)*d.C] {
			s += float64(v) * float64(v)
		}
		wmax = max(wmax, math.Sqrt(s))
	}
	S := math.Sqrt(float64(d.C)) * g * wmax
	return 4 * float64(6*d.L+1) * 0x1p-8 * S
}

// roundedBF16 is src rounded to bfloat16 (blas.RoundBF16), rows of cols
// values at a time across the cores.
func roundedBF16(src []float32, cols int) []uint16 {
	dst := make([]uint16, len(src))
	parallelFor(len(src)/cols, 64, func(lo, hi int) { blas.RoundBF16(dst[lo*cols:hi*cols], src[lo*cols:hi*cols]) })
	return dst
}

// DecodesInBF16 reports whether DecodeBF16 is on.
func (m *Model) DecodesInBF16() bool { return m.bf16 != nil }

// linearBF16 is out[N,O] = round(in)[N,I]·Wᵀ + b for the packed W.
func (w *stepWork) linearBF16(out, in []float32, mat *blas.BF16Matrix, b []float32, N, I int) error {
	if cap(w.x16) < N*I {
		w.x16 = make([]uint16, N*I)
	}
	x := w.x16[:N*I]
	blas.RoundBF16(x, in[:N*I])
	if err := mat.Mul(out, mat.O, x, N); err != nil {
		return fmt.Errorf("model: decode step: %w", err)
	}
	addBias(out, b, N, mat.O)
	return nil
}
