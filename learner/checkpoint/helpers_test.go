package checkpoint

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// randTensors builds a small Llama-shaped tensor set with values of a wide
// dynamic range, plus a scalar and an empty tensor.
func randTensors(seed uint64) []Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	mk := func(name string, shape ...int) Tensor {
		t := Tensor{Name: name, Shape: shape}
		t.Data = make([]float32, t.Numel())
		for i := range t.Data {
			t.Data[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
		}
		return t
	}
	return []Tensor{
		mk("model.embed_tokens.weight", 32, 8),
		mk("model.layers.0.self_attn.q_proj.weight", 8, 8),
		mk("model.layers.0.self_attn.q_proj.bias", 8),
		mk("model.layers.0.mlp.down_proj.weight", 8, 20),
		mk("model.norm.weight", 8),
		mk("scalar"),
		mk("empty", 0, 4),
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read fixture %s: %v (regenerate with /usr/bin/python3 scripts/checkpoint_fixtures.py)", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("fixture %s: %v", path, err)
	}
}

// sameTensors fails naming the first tensor and element that differ in bits.
func sameTensors(t *testing.T, want, got []Tensor) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.Name != g.Name {
			t.Fatalf("tensor %d is %q, want %q", i, g.Name, w.Name)
		}
		if !equalInts(w.Shape, g.Shape) {
			t.Fatalf("tensor %q has shape %v, want %v", w.Name, g.Shape, w.Shape)
		}
		if len(w.Data) != len(g.Data) {
			t.Fatalf("tensor %q has %d values, want %d", w.Name, len(g.Data), len(w.Data))
		}
		for j := range w.Data {
			if math.Float32bits(w.Data[j]) != math.Float32bits(g.Data[j]) {
				t.Fatalf("tensor %q element %d is %g, want %g (bit-exact)", w.Name, j, g.Data[j], w.Data[j])
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
