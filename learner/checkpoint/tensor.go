package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/bf16"
)

// Tensor is a named float32 array in row-major order. Shape [] is a scalar
// (one element).
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Numel is the number of elements the shape describes.
func (t Tensor) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Validate checks that the tensor has a name, non-negative dimensions and
// exactly as many values as its shape holds.
func (t Tensor) Validate() error {
	if t.Name == "" {
		return fmt.Errorf("tensor with shape %v has no name", t.Shape)
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		if d > 0 && n > (1<<50)/int64(d) {
			return fmt.Errorf("tensor %q: shape %v is too large", t.Name, t.Shape)
		}
		n *= int64(d)
	}
	if int64(len(t.Data)) != n {
		return fmt.Errorf("tensor %q: shape %v holds %d values but Data has %d", t.Name, t.Shape, n, len(t.Data))
	}
	return nil
}

// validateSet checks every tensor and that names are unique.
func validateSet(ts []Tensor) error {
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// DType is a safetensors element type.
type DType string

// Element types this package reads; F32, BF16 and F16 are also written.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// Size is the element size in bytes, or 0 for a type this package does not
// handle.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// TorchName is the torch dtype name of d as config.json's torch_dtype
// writes it ("float32", "bfloat16", "float16"), or d lower-cased for a type
// this package does not write.
func (d DType) TorchName() string {
	switch d {
	case F32:
		return "float32"
	case BF16:
		return "bfloat16"
	case F16:
		return "float16"
	}
	return strings.ToLower(string(d))
}

// knownDTypes are the safetensors element types of the format; those other
// than F32/BF16/F16 parse but are refused when the data is read.
var knownDTypes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// BF16ToFloat32 widens a bfloat16 bit pattern; it is exact (bf16.ToFloat32).
func BF16ToFloat32(h uint16) float32 { return bf16.ToFloat32(h) }

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even, as
// PyTorch's .to(torch.bfloat16) does (bf16.FromFloat32).
func Float32ToBF16(f float32) uint16 { return bf16.FromFloat32(f) }

// F16ToFloat32 widens an IEEE 754 binary16 bit pattern (subnormals, infinities
// and NaN included); it is exact.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Float32ToF16 rounds f to the nearest IEEE binary16, ties to even; values
// beyond 65504 (after rounding) become infinity, tiny values become
// subnormal or zero.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 { // below half the smallest subnormal: rounds to zero
			return sign
		}
		// subnormal: shift the full significand (implicit bit included)
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := man & (1<<shift - 1)
		r := man >> shift
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: still correct
	}
	return sign | uint16(r)
}

// nativeLittle is true on little-endian machines, where float32 data is
// copied to and from files without conversion.
var nativeLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32Bytes views a float32 slice as its bytes (native order).
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// decodeInto converts little-endian raw elements of type dt into dst.
func decodeInto(dst []float32, raw []byte, dt DType) {
	switch dt {
	case F32:
		if nativeLittle {
			copy(f32Bytes(dst), raw)
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	}
}

// encodeInto converts src to little-endian raw elements of type dt; raw
// holds len(src)*dt.Size() bytes.
func encodeInto(raw []byte, src []float32, dt DType) {
	switch dt {
	case F32:
		if nativeLittle {
			copy(raw, f32Bytes(src))
			return
		}
		for i, v := range src {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(raw[2*i:], Float32ToBF16(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(raw[2*i:], Float32ToF16(v))
		}
	}
}
