package model

import (
	"testing"
)

// Tolerances against the float64 PyTorch reference. Go computes in float32
// with a different summation order (OpenBLAS blocking, per-core partial
// sums); float32 has a relative precision of 6e-8, and errors of one
// operation grow with the square root of its reduction length (C, F, V, T)
// and compound over the layers. The figures below are about ten times the
// largest differences observed on both fixtures, so they catch any real
// mistake (a wrong mask, rotation or index shifts results by 1e-2 or more
// of the tensor's scale) without flagging rounding.
var (
	tolLogits = tolerance{abs: 2e-5, rel: 2e-5}
	tolGrad   = tolerance{abs: 1e-4, rel: 1e-3}
)

func TestTinyQwen2MatchesPyTorch(t *testing.T) {
	m, ts := loadFixture(t, "tiny_qwen2")
	checkFixtureVariants(t, m, ts)
	logWorst(t, m, ts)
}

// checkAgainstFixture runs forward and backward on the fixture's batch and
// compares logits, log-probs, entropies, the loss and the stored gradients.
func checkAgainstFixture(t *testing.T, m *Model, ts map[string]NamedTensor, allGrads bool, mode headMode) {
	t.Helper()
	b, w := fixtureBatch(t, ts)
	logits, err := m.Logits(b)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "logits", logits, fixture(t, ts, "logits"), tolLogits)
	p, err := m.prepare(b, false)
	if err != nil {
		t.Fatal(err)
	}
	acts := m.forwardPass(p, mode, m.trainKeep())
	compare(t, "logprobs", acts.LogProbs, fixture(t, ts, "logprobs"), tolLogits)
	compare(t, "entropy", acts.Entropy, fixture(t, ts, "entropy"), tolLogits)
	var loss float64
	for i, lp := range acts.LogProbs {
		loss += float64(w[i]) * float64(lp)
	}
	compare(t, "loss", []float32{float32(loss)}, fixture(t, ts, "loss"), tolerance{rel: 1e-5})
	m.ZeroGrads()
	if err := m.Backward(acts, w); err != nil {
		t.Fatal(err)
	}
	grads := m.Grads()
	checked := 0
	for _, g := range grads {
		want, ok := ts["grad."+g.Name]
		if !ok {
			if allGrads {
				t.Errorf("fixture has no gradient for %s", g.Name)
			}
			continue
		}
		compare(t, "grad."+g.Name, g.Data, want.Data, tolGrad)
		checked++
	}
	if checked == 0 {
		t.Fatal("no gradient compared")
	}
}
