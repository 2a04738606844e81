package checkpoint

import (
	"math"
	"testing"
)

// TestDTypeRoundingMatchesPyTorch compares our float32 -> bfloat16 / float16
// rounding with PyTorch's .to(dtype) on random values and on the edge cases
// (ties, overflow, subnormals, infinities) listed in the fixture script.
func TestDTypeRoundingMatchesPyTorch(t *testing.T) {
	var fx struct {
		F32  []uint32 `json:"f32_bits"`
		BF16 []uint16 `json:"bf16_bits"`
		F16  []uint16 `json:"f16_bits"`
	}
	readJSON(t, "testdata/dtypes.json", &fx)
	if len(fx.F32) == 0 || len(fx.F32) != len(fx.BF16) || len(fx.F32) != len(fx.F16) {
		t.Fatalf("dtypes.json: %d inputs, %d bf16, %d f16 results", len(fx.F32), len(fx.BF16), len(fx.F16))
	}
	for i, b := range fx.F32 {
		f := math.Float32frombits(b)
		if got := Float32ToBF16(f); got != fx.BF16[i] {
			t.Errorf("bf16(%g = %#08x) = %#04x, PyTorch gives %#04x", f, b, got, fx.BF16[i])
		}
		if got := Float32ToF16(f); got != fx.F16[i] {
			t.Errorf("f16(%g = %#08x) = %#04x, PyTorch gives %#04x", f, b, got, fx.F16[i])
		}
	}
}

// TestDTypeWideningIsExact checks every 16-bit pattern: widening to float32
// and rounding back returns the same pattern (NaNs stay NaN).
func TestDTypeWideningIsExact(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		u := uint16(h)
		bf := BF16ToFloat32(u)
		if bf != bf {
			if g := Float32ToBF16(bf); BF16ToFloat32(g) == BF16ToFloat32(g) {
				t.Fatalf("bf16 NaN %#04x came back as non-NaN %#04x", u, g)
			}
		} else if g := Float32ToBF16(bf); g != u {
			t.Fatalf("bf16 %#04x -> %g -> %#04x", u, bf, g)
		}
		hf := F16ToFloat32(u)
		if hf != hf {
			if g := Float32ToF16(hf); F16ToFloat32(g) == F16ToFloat32(g) {
				t.Fatalf("f16 NaN %#04x came back as non-NaN %#04x", u, g)
			}
		} else if g := Float32ToF16(hf); g != u {
			t.Fatalf("f16 %#04x -> %g -> %#04x", u, hf, g)
		}
	}
	// Spot values with known encodings.
	for _, c := range []struct {
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00}, {-2, 0xc000, 0xc000}, {0.5, 0x3f00, 0x3800},
		{65504, 0x4780, 0x7bff}, {float32(math.Ldexp(1, -24)), 0x3380, 0x0001},
	} {
		if g := Float32ToBF16(c.f); g != c.bf16 {
			t.Errorf("bf16(%g) = %#04x, want %#04x", c.f, g, c.bf16)
		}
		if g := Float32ToF16(c.f); g != c.f16 {
			t.Errorf("f16(%g) = %#04x, want %#04x", c.f, g, c.f16)
		}
	}
}

func TestTensorValidate(t *testing.T) {
	for _, c := range []struct {
		t    Tensor
		want string
	}{
		{Tensor{Shape: []int{1}, Data: []float32{1}}, "no name"},
		{Tensor{Name: "x", Shape: []int{2, 2}, Data: []float32{1}}, "holds 4 values but Data has 1"},
		{Tensor{Name: "x", Shape: []int{-1}, Data: nil}, "negative dimension"},
	} {
		err := c.t.Validate()
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", c.t, err, c.want)
		}
	}
	if err := validateSet([]Tensor{{Name: "a", Data: []float32{1}}, {Name: "a", Data: []float32{2}}}); err == nil || !contains(err.Error(), `"a" appears twice`) {
		t.Errorf("duplicate names: got %v", err)
	}
}
