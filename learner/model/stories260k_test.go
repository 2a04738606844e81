//go:build shareddata

package model

import (
	"math"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
)

func TestStories260KMatchesPyTorch(t *testing.T) {
	path := stories260KPath(t)
	m, err := LoadLlama2C(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := mustTNS(t, "testdata/stories260K.tns")
	checkAgainstFixture(t, m, ts, false, headAuto)
	// Gradient norms of every tensor (full gradients are checked above for
	// the few the fixture stores).
	for _, g := range m.Grads() {
		want := fixture(t, ts, "gradnorm."+g.Name)
		var s float64
		for _, v := range g.Data {
			s += float64(v) * float64(v)
		}
		compare(t, "gradnorm."+g.Name, []float32{float32(math.Sqrt(s))}, want, tolerance{rel: 1e-3})
	}
}

// stories260KPath finds the shared stories260K checkpoint or skips: it is
// larger than the fixtures kept in the repository.
func stories260KPath(t *testing.T) string {
	t.Helper()
	return shareddata.Path(t, "models/stories260K/stories260K.bin")
}

func TestGreedyCachedEqualsRecomputeStories260K(t *testing.T) {
	m, err := LoadLlama2C(stories260KPath(t))
	if err != nil {
		t.Fatal(err)
	}
	// BOS then a few story tokens; 100 greedy tokens cross one qBlock.
	checkGreedy(t, m, []int32{1, 403, 407, 261, 378, 426}, 100)
}

// TestCachedLogProbsMatchForward: log-probabilities from cached logits with
// LogSumExp equal Forward's log-probs of the same tokens. Tolerance as
// tolCached: the same arithmetic on logits that agree to that bound.
func TestCachedLogProbsMatchForward(t *testing.T) {
	m, err := LoadLlama2C(stories260KPath(t))
	if err != nil {
		t.Fatal(err)
	}
	seq := []int32{1, 403, 407, 261, 378, 426}
	c := m.NewKVCache()
	lg, err := m.Extend([]*KVCache{c}, [][]int32{seq}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	for i := 0; i < 40; i++ {
		tok := int32((i * 37) % m.cfg.VocabSize) // arbitrary, not greedy
		got = append(got, lg[tok]-LogSumExp(lg))
		seq = append(seq, tok)
		if lg, err = m.Extend([]*KVCache{c}, [][]int32{{tok}}, lg); err != nil {
			t.Fatal(err)
		}
	}
	a, err := m.Forward(Batch{Tokens: seq})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	want := a.LogProbs[5 : 5+len(got)]
	if d, at := maxDiff(got, want); d > tolCached {
		t.Fatalf("cached log-prob of generated token %d is %g, Forward says %g (diff %.3g)", at, got[at], want[at], d)
	}
}

// TestExtendBitwiseIndependentOfBatchStories260K is
// TestExtendBitwiseIndependentOfBatch on stories260K, whose shapes lie on
// the other side of OpenBLAS's small-matrix threshold.
func TestExtendBitwiseIndependentOfBatchStories260K(t *testing.T) {
	m, err := LoadLlama2C(stories260KPath(t))
	if err != nil {
		t.Fatal(err)
	}
	checkExtendBitwise(t, m)
}
