package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/aipo-rl/aipo/learner/blas"
	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// bf16Copy is a copy of m whose every parameter is rounded to bfloat16
// (to nearest even), as a model loaded from a bfloat16 checkpoint is.
func bf16Copy(t testing.TB, m *Model) *Model {
	t.Helper()
	ts := map[string]NamedTensor{}
	for _, p := range m.Params() {
		d := make([]float32, len(p.Data))
		for i, v := range p.Data {
			d[i] = checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v))
		}
		ts[p.Name] = NamedTensor{Name: p.Name, Shape: p.Shape, Data: d}
	}
	c, err := FromTensors(m.Config(), ts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A model held in bfloat16 scores as the float32 model of the same
// (bfloat16-exact) weights does, bit for bit, for the three architectures
// (Qwen2's biases, Qwen3's q/k norm and separate head, Llama 3's tied
// embeddings), with the head whole or in chunks and the matrices widened
// in one slice or in many (a slice size that leaves a remainder).
func TestHoldBF16ScoresBitIdentical(t *testing.T) {
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3", "tiny_llama3"} {
		t.Run(name, func(t *testing.T) {
			f32, _ := loadFixture(t, name)
			if f32.HoldBF16() {
				t.Fatal("HoldBF16 narrowed float32 weights that are not bfloat16 values")
			}
			if f32.HeldInBF16() || len(f32.ParamData()) != f32.NumParams() {
				t.Fatal("a refused HoldBF16 changed the model")
			}
			want := bf16Copy(t, f32)
			got := bf16Copy(t, f32)
			if !columnSlicesExact() {
				// Kernels that change a column's bits with the slicing
				// (OpenBLAS's Haswell ones): holding would not be exact, so
				// HoldBF16 must decline and leave the model in float32.
				if got.HoldBF16() || got.HeldInBF16() || len(got.ParamData()) != got.NumParams() {
					t.Fatalf("HoldBF16 narrowed a model on kernels that slice inexactly (%s)", blas.Backend())
				}
				t.Logf("BLAS %s slices columns inexactly: HoldBF16 declined, the model stays float32", blas.Backend())
				return
			}
			if !got.HoldBF16() || !got.HeldInBF16() {
				t.Fatal("HoldBF16 refused bfloat16-exact weights")
			}
			if got.NumParams() != want.NumParams() {
				t.Fatalf("NumParams %d held in bfloat16, %d in float32", got.NumParams(), want.NumParams())
			}
			C := got.Config().HiddenSize
			b := randomBatch(rand.New(rand.NewPCG(3, 4)), got.Config().VocabSize, 37, 5, 22)
			for _, v := range []struct {
				name         string
				slice, logit int
			}{
				{"one slice", narrowSliceFloats, keepLogitsFloats},
				{"many slices", 64*C + 5, keepLogitsFloats},
				{"head in chunks", 64*C + 5, 0},
				{"head in tiles of vocabulary slices", 64*C + 5, -1},
			} {
				t.Run(v.name, func(t *testing.T) {
					defer func(s, k, c int) { narrowSliceFloats, keepLogitsFloats, chunkFloats = s, k, c }(narrowSliceFloats, keepLogitsFloats, chunkFloats)
					narrowSliceFloats, keepLogitsFloats = v.slice, v.logit
					switch v.logit {
					case 0:
						chunkFloats = 7 * got.Config().VocabSize
					case -1:
						defer func(s int) { minSliceCols = s }(minSliceCols)
						keepLogitsFloats, chunkFloats, minSliceCols = 0, 5*sliceAlign, sliceAlign
					}
					wlp, went, err := want.Score(b)
					if err != nil {
						t.Fatal(err)
					}
					glp, gent, err := got.Score(b)
					if err != nil {
						t.Fatal(err)
					}
					for i := range wlp {
						if math.Float32bits(glp[i]) != math.Float32bits(wlp[i]) || math.Float32bits(gent[i]) != math.Float32bits(went[i]) {
							t.Fatalf("token %d: log-prob %v entropy %v held in bfloat16, %v %v in float32", i, glp[i], gent[i], wlp[i], went[i])
						}
					}
				})
			}
		})
	}
}

// A model held in bfloat16 runs Score alone: the passes that train or
// serve say why they cannot run, and the float32 views are gone.
func TestHoldBF16ScoresAlone(t *testing.T) {
	m, _ := loadFixture(t, "tiny_qwen2")
	m = bf16Copy(t, m)
	if !m.holdBF16() { // whatever the kernels: what a held model refuses
		t.Fatal("HoldBF16 refused bfloat16-exact weights")
	}
	b := randomBatch(rand.New(rand.NewPCG(1, 2)), m.Config().VocabSize, 9)
	if _, err := m.Forward(b); !errors.Is(err, errNarrow) {
		t.Errorf("Forward: %v, want %v", err, errNarrow)
	}
	if _, err := m.Logits(b); !errors.Is(err, errNarrow) {
		t.Errorf("Logits: %v, want %v", err, errNarrow)
	}
	if _, err := m.Extend([]*KVCache{m.NewKVCache()}, [][]int32{{1}}, nil); !errors.Is(err, errNarrow) {
		t.Errorf("Extend: %v, want %v", err, errNarrow)
	}
	defer func() {
		if r := recover(); r != errNarrow {
			t.Errorf("ParamData: recovered %v, want a panic with %v", r, errNarrow)
		}
	}()
	m.ParamData()
}

// A model that has gradients trains: HoldBF16 leaves it alone.
func TestHoldBF16RefusesATrainingModel(t *testing.T) {
	m, _ := loadFixture(t, "tiny_qwen2")
	m = bf16Copy(t, m)
	m.GradData()
	if m.HoldBF16() {
		t.Fatal("HoldBF16 narrowed a model with gradients")
	}
}
