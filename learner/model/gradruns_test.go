package model

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGradsReadyReportsFinishedRuns checks SetGradsReady's promise: the
// runs come in GradRuns' order, cover the gradient buffer once, and each
// holds its final value when it is reported (a copy taken then equals the
// buffer after the pass), with a tied and an untied head, Qwen3's q/k norm
// and checkpointed passes.
func TestGradsReadyReportsFinishedRuns(t *testing.T) {
	untied := tinyConfig()
	untied.TieWordEmbeddings = false
	qwen3 := tinyConfig()
	qwen3.ModelType, qwen3.HeadDim = "qwen3", 8
	for _, c := range []struct {
		name       string
		cfg        Config
		checkpoint bool
	}{{"tied", tinyConfig(), false}, {"untied", untied, false}, {"qwen3-checkpointed", qwen3, true}} {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(c.cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			m.SetCheckpointing(c.checkpoint)
			runs := m.GradRuns()
			if len(runs) != c.cfg.NumHiddenLayers+2 {
				t.Fatalf("%d runs for %d layers", len(runs), c.cfg.NumHiddenLayers)
			}
			covered := make([]int, m.NumParams())
			for _, s := range runs {
				for i := s.Off; i < s.Off+s.Len; i++ {
					covered[i]++
				}
			}
			if i := slices.IndexFunc(covered, func(n int) bool { return n != 1 }); i >= 0 {
				t.Fatalf("element %d of the gradient lies in %d runs", i, covered[i])
			}
			r := rand.New(rand.NewPCG(5, 6))
			b := randomBatch(r, c.cfg.VocabSize, 40, 23)
			w := make([]float32, len(b.Tokens))
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			// Two passes: the second adds to the first's gradients, and
			// the runs are reported again.
			var order []int
			var seen [][]float32
			m.SetGradsReady(func(run int) {
				order = append(order, run)
				s := runs[run]
				seen = append(seen, slices.Clone(m.GradData()[s.Off:s.Off+s.Len]))
			})
			for range 2 {
				a, err := m.Forward(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(a, w); err != nil {
					t.Fatal(err)
				}
			}
			m.SetGradsReady(nil)
			want := make([]int, 0, 2*len(runs))
			for range 2 {
				for i := range runs {
					want = append(want, i)
				}
			}
			if !slices.Equal(order, want) {
				t.Fatalf("runs reported in the order %v, want %v", order, want)
			}
			g := m.GradData()
			for i, run := range order[len(runs):] {
				s := runs[run]
				if !slices.Equal(seen[len(runs)+i], g[s.Off:s.Off+s.Len]) {
					t.Errorf("run %d (%d floats from %d) changed after it was reported", run, s.Len, s.Off)
				}
			}
			var nonzero int
			for _, x := range g {
				if x != 0 {
					nonzero++
				}
			}
			if nonzero < len(g)/2 {
				t.Fatalf("only %d of %d gradients are nonzero: the pass did not train", nonzero, len(g))
			}
		})
	}
}
