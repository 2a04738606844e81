package model

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"testing"
)

// readTNS reads a tensor file written by scripts/model_fixtures.py:
// "AIPOTNS1", uint32 count, then per tensor uint32 name length, name,
// uint32 rank, dims, float32 data (little-endian).
func readTNS(path string) (map[string]NamedTensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	magic := make([]byte, 8)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "AIPOTNS1" {
		return nil, fmt.Errorf("%s: not an AIPOTNS1 file (regenerate with scripts/model_fixtures.py)", path)
	}
	var count uint32
	if err := binary.Read(f, binary.LittleEndian, &count); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]NamedTensor{}
	for i := 0; i < int(count); i++ {
		var n uint32
		if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("%s: tensor %d: %w", path, i, err)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(f, name); err != nil {
			return nil, fmt.Errorf("%s: tensor %d: %w", path, i, err)
		}
		var rank uint32
		if err := binary.Read(f, binary.LittleEndian, &rank); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		dims := make([]uint32, rank)
		if err := binary.Read(f, binary.LittleEndian, dims); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		shape, size := make([]int, rank), 1
		for j, d := range dims {
			shape[j] = int(d)
			size *= int(d)
		}
		data := make([]float32, size)
		if err := binary.Read(f, binary.LittleEndian, data); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		out[string(name)] = NamedTensor{Name: string(name), Shape: shape, Data: data}
	}
	return out, nil
}

func mustTNS(t *testing.T, path string) map[string]NamedTensor {
	t.Helper()
	ts, err := readTNS(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func fixture(t *testing.T, ts map[string]NamedTensor, name string) []float32 {
	t.Helper()
	x, ok := ts[name]
	if !ok {
		t.Fatalf("fixture has no tensor %q; regenerate with scripts/model_fixtures.py", name)
	}
	return x.Data
}

func ints32(x []float32) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

func ints(x []float32) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

// fixtureBatch rebuilds the packed batch and loss weights of a fixture.
func fixtureBatch(t *testing.T, ts map[string]NamedTensor) (Batch, []float32) {
	b := Batch{Tokens: ints32(fixture(t, ts, "batch.tokens")), SeqLens: ints(fixture(t, ts, "batch.seq_lens")),
		Targets: ints32(fixture(t, ts, "batch.targets"))}
	return b, fixture(t, ts, "batch.weights")
}

// tolerance says how far got may be from a float64 reference want:
// |got-want| <= abs*scale + rel*|want|, where scale is the largest |want| of
// the tensor (so that near-zero entries are judged against the tensor's size).
type tolerance struct{ abs, rel float64 }

// compare fails naming the tensor, the worst entry and its absolute and
// relative difference.
func compare(t *testing.T, name string, got, want []float32, tol tolerance) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, reference has %d", name, len(got), len(want))
		return
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	worst, at, excess := 0.0, -1, 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		limit := tol.abs*scale + tol.rel*math.Abs(float64(want[i]))
		if math.IsNaN(d) {
			t.Errorf("%s[%d] is NaN (reference %v)", name, i, want[i])
			return
		}
		if d > worst {
			worst = d
		}
		if e := d - limit; e > excess || (at < 0 && e > 0) {
			excess, at = e, i
		}
	}
	if at >= 0 {
		rel := math.Abs(float64(got[at])-float64(want[at])) / math.Max(math.Abs(float64(want[at])), 1e-30)
		t.Errorf("%s: worst entry [%d] = %v, reference %v (abs diff %.3g, rel diff %.3g; tensor max |ref| %.3g, tolerance %.0e*max + %.0e*|ref|)",
			name, at, got[at], want[at], math.Abs(float64(got[at])-float64(want[at])), rel, scale, tol.abs, tol.rel)
	} else if testing.Verbose() {
		t.Logf("%s: max abs diff %.3g (tensor max |ref| %.3g; relative to it %.3g)", name, worst, scale, worst/math.Max(scale, 1e-30))
	}
}
