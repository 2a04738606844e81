package cuda

import (
	"fmt"
	"unsafe"
)

// DType is the element type of a Buffer.
type DType int

// Element types.
const (
	F32  DType = iota // float32
	BF16              // bfloat16, held on the host as uint16 bit patterns
	I32               // int32 (token ids, positions)
	F64               // float64 (reduction partials)
)

// Size is the element size in bytes.
func (t DType) Size() int {
	switch t {
	case BF16:
		return 2
	case F64:
		return 8
	}
	return 4
}

func (t DType) String() string {
	switch t {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case F64:
		return "f64"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// Buffer is a device allocation of n elements of one DType (cuMemAlloc,
// not managed memory), or a view of part of one (Slice). A Buffer belongs
// to the Device that allocated it.
type Buffer struct {
	dev   *Device
	ptr   uint64
	n     int
	dt    DType
	owner bool // false for views
	freed bool
}

// Alloc allocates n elements of dt. The contents are undefined; call Zero
// to clear them. A zero-length Buffer holds no device memory.
func (dv *Device) Alloc(dt DType, n int) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cuda: Alloc of %d elements", n)
	}
	b := &Buffer{dev: dv, n: n, dt: dt, owner: true}
	if n == 0 {
		return b, nil
	}
	bytes := uint64(n) * uint64(dt.Size())
	err := dv.do(func() error {
		return dv.d.err("cuMemAlloc_v2", dv.d.cuMemAlloc(&b.ptr, bytes))
	})
	if err != nil {
		return nil, fmt.Errorf("%w (allocating %d bytes)", err, bytes)
	}
	dv.account(int64(bytes))
	return b, nil
}

// Len is the number of elements.
func (b *Buffer) Len() int { return b.n }

// DType is the element type.
func (b *Buffer) DType() DType { return b.dt }

// Bytes is the size in bytes.
func (b *Buffer) Bytes() uint64 { return uint64(b.n) * uint64(b.dt.Size()) }

// Slice returns a view of elements [lo, hi); it shares the memory and
// must not be used after the parent is freed.
func (b *Buffer) Slice(lo, hi int) (*Buffer, error) {
	if b.freed {
		return nil, fmt.Errorf("cuda: Slice of a freed buffer")
	}
	if lo < 0 || hi < lo || hi > b.n {
		return nil, fmt.Errorf("cuda: Slice [%d,%d) of a buffer of %d elements", lo, hi, b.n)
	}
	return &Buffer{dev: b.dev, ptr: b.ptr + uint64(lo)*uint64(b.dt.Size()), n: hi - lo, dt: b.dt}, nil
}

// as returns a view of b's first bytes as n elements of dt (a pair of
// bfloat16 values is the bytes of one float32 word): ZeRO stage 3's
// bfloat16 units travel through the collectives, which move float32
// words, and land in float32 buffers. The bytes must be within b's.
func (b *Buffer) as(dt DType, n int) (*Buffer, error) {
	if b.freed {
		return nil, fmt.Errorf("cuda: a view of a freed buffer")
	}
	if n < 0 || uint64(n)*uint64(dt.Size()) > b.Bytes() {
		return nil, fmt.Errorf("cuda: a view of %d %s in a buffer of %d %s", n, dt, b.n, b.dt)
	}
	return &Buffer{dev: b.dev, ptr: b.ptr, n: n, dt: dt}, nil
}

// Free releases the allocation; views cannot be freed.
func (b *Buffer) Free() error {
	if !b.owner {
		return fmt.Errorf("cuda: Free of a view; free the buffer it was sliced from")
	}
	if b.freed {
		return nil
	}
	b.freed = true
	if b.ptr == 0 {
		return nil
	}
	b.dev.account(-int64(b.Bytes()))
	return b.dev.do(func() error { return b.dev.d.err("cuMemFree_v2", b.dev.d.cuMemFree(b.ptr)) })
}

// Zero sets every byte to zero (after the work already queued).
func (b *Buffer) Zero() error {
	if err := b.usable(); err != nil || b.n == 0 {
		return err
	}
	dv := b.dev
	return dv.do(func() error {
		if err := dv.syncLocked(); err != nil {
			return err
		}
		return dv.d.err("cuMemsetD8_v2", dv.d.cuMemsetD8(b.ptr, 0, b.Bytes()))
	})
}

func (b *Buffer) usable() error {
	if b == nil {
		return fmt.Errorf("cuda: nil buffer")
	}
	if b.freed {
		return fmt.Errorf("cuda: use of a freed buffer")
	}
	return nil
}

// copyIn copies n elements from host memory p after the queued work.
func (b *Buffer) copyIn(dt DType, p unsafe.Pointer, n int) error {
	if err := b.check(dt, n, "copy to the device"); err != nil || n == 0 {
		return err
	}
	dv := b.dev
	return dv.do(func() error {
		if err := dv.syncLocked(); err != nil {
			return err
		}
		return dv.d.err("cuMemcpyHtoD_v2", dv.d.cuMemcpyHtoD(b.ptr, p, b.Bytes()))
	})
}

// CopyFrom copies src (same type and length) into b on the device, after
// the queued work.
func (b *Buffer) CopyFrom(src *Buffer) error {
	if err := src.usable(); err != nil {
		return err
	}
	if err := b.usable(); err != nil {
		return err
	}
	if b.dt != src.dt || b.n != src.n {
		return fmt.Errorf("cuda: device copy of %d %s into %d %s", src.n, src.dt, b.n, b.dt)
	}
	if src.n == 0 {
		return nil
	}
	if src.dev != b.dev {
		return fmt.Errorf("cuda: device copy between buffers of two devices")
	}
	dv := b.dev
	return dv.do(func() error {
		if err := dv.syncLocked(); err != nil {
			return err
		}
		return dv.d.err("cuMemcpyDtoD_v2", dv.d.cuMemcpyDtoD(b.ptr, src.ptr, b.Bytes()))
	})
}

// copyOut copies n elements to host memory p once the queued work is done.
func (b *Buffer) copyOut(dt DType, p unsafe.Pointer, n int) error {
	if err := b.check(dt, n, "copy to the host"); err != nil || n == 0 {
		return err
	}
	dv := b.dev
	return dv.do(func() error {
		if err := dv.syncLocked(); err != nil {
			return err
		}
		return dv.d.err("cuMemcpyDtoH_v2", dv.d.cuMemcpyDtoH(p, b.ptr, b.Bytes()))
	})
}

func (b *Buffer) check(dt DType, n int, what string) error {
	if err := b.usable(); err != nil {
		return err
	}
	if b.dt != dt {
		return fmt.Errorf("cuda: %s: the buffer holds %s, not %s", what, b.dt, dt)
	}
	if n != b.n {
		return fmt.Errorf("cuda: %s: the host slice has %d elements, the buffer %d", what, n, b.n)
	}
	return nil
}

// CopyFromFloat32 fills an F32 buffer from src (same length).
func (b *Buffer) CopyFromFloat32(src []float32) error {
	return b.copyIn(F32, unsafe.Pointer(unsafe.SliceData(src)), len(src))
}

// CopyToFloat32 reads an F32 buffer into dst (same length).
func (b *Buffer) CopyToFloat32(dst []float32) error {
	return b.copyOut(F32, unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}

// CopyFromUint16 fills a BF16 buffer from bfloat16 bit patterns.
func (b *Buffer) CopyFromUint16(src []uint16) error {
	return b.copyIn(BF16, unsafe.Pointer(unsafe.SliceData(src)), len(src))
}

// CopyToUint16 reads a BF16 buffer as bfloat16 bit patterns.
func (b *Buffer) CopyToUint16(dst []uint16) error {
	return b.copyOut(BF16, unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}

// CopyFromInt32 fills an I32 buffer from src.
func (b *Buffer) CopyFromInt32(src []int32) error {
	return b.copyIn(I32, unsafe.Pointer(unsafe.SliceData(src)), len(src))
}

// CopyToInt32 reads an I32 buffer into dst.
func (b *Buffer) CopyToInt32(dst []int32) error {
	return b.copyOut(I32, unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}

// CopyToFloat64 reads an F64 buffer into dst.
func (b *Buffer) CopyToFloat64(dst []float64) error {
	return b.copyOut(F64, unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}

// Upload allocates an F32 buffer holding a copy of src.
func (dv *Device) Upload(src []float32) (*Buffer, error) {
	b, err := dv.Alloc(F32, len(src))
	if err != nil {
		return nil, err
	}
	if err := b.CopyFromFloat32(src); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}
