package collective

import (
	"fmt"
	"unsafe"
)

// Buffer is memory a collective reads or writes: Float32s or Bytes in host
// memory (Gloo), DeviceFloat32s or DeviceBytes in GPU memory (NCCL).
type Buffer interface {
	// Len is the number of elements.
	Len() int
	// ElemSize is the size of one element in bytes.
	ElemSize() int
	// OnDevice reports whether the memory is a GPU's.
	OnDevice() bool
	// Float reports whether the elements are float32.
	Float() bool
	fmt.Stringer
}

// Float32s is host memory of float32.
type Float32s []float32

// Bytes is host memory of bytes (Broadcast only).
type Bytes []byte

// DeviceFloat32s is N float32 at device address Ptr (a CUdeviceptr).
type DeviceFloat32s struct {
	Ptr uintptr
	N   int
}

// DeviceBytes is N bytes at device address Ptr (Broadcast only).
type DeviceBytes struct {
	Ptr uintptr
	N   int
}

func (b Float32s) Len() int             { return len(b) }
func (Float32s) ElemSize() int          { return 4 }
func (Float32s) OnDevice() bool         { return false }
func (Float32s) Float() bool            { return true }
func (b Float32s) String() string       { return fmt.Sprintf("host float32[%d]", len(b)) }
func (b Bytes) Len() int                { return len(b) }
func (Bytes) ElemSize() int             { return 1 }
func (Bytes) OnDevice() bool            { return false }
func (Bytes) Float() bool               { return false }
func (b Bytes) String() string          { return fmt.Sprintf("host bytes[%d]", len(b)) }
func (b DeviceFloat32s) Len() int       { return b.N }
func (DeviceFloat32s) ElemSize() int    { return 4 }
func (DeviceFloat32s) OnDevice() bool   { return true }
func (DeviceFloat32s) Float() bool      { return true }
func (b DeviceFloat32s) String() string { return fmt.Sprintf("device float32[%d]", b.N) }
func (b DeviceBytes) Len() int          { return b.N }
func (DeviceBytes) ElemSize() int       { return 1 }
func (DeviceBytes) OnDevice() bool      { return true }
func (DeviceBytes) Float() bool         { return false }
func (b DeviceBytes) String() string    { return fmt.Sprintf("device bytes[%d]", b.N) }

// HostPointer returns the address of a host buffer's first element (nil
// when it is empty) for an engine call.
func HostPointer(b Buffer) unsafe.Pointer {
	switch v := b.(type) {
	case Float32s:
		if len(v) > 0 {
			return unsafe.Pointer(&v[0])
		}
	case Bytes:
		if len(v) > 0 {
			return unsafe.Pointer(&v[0])
		}
	}
	return nil
}

// DevicePointer returns a device buffer's address.
func DevicePointer(b Buffer) uintptr {
	switch v := b.(type) {
	case DeviceFloat32s:
		return v.Ptr
	case DeviceBytes:
		return v.Ptr
	}
	return 0
}

// Args checks a collective's buffers and counts before any engine call, so
// that a mistake is reported the same way by every backend.
type Args struct {
	Backend string
	Op      string
	Rank    int
	Size    int
	Device  bool // the backend takes device memory (else host memory)
}

// Buf checks that b is float32 (or any kind when anyKind) memory of the
// backend's kind with want elements (want < 0: any length).
func (a Args) Buf(name string, b Buffer, want int, anyKind bool) error {
	if b == nil {
		return Invalid(a.Backend, a.Op, "%s is nil", name)
	}
	if b.OnDevice() != a.Device {
		where := "host"
		if a.Device {
			where = "device"
		}
		return Invalid(a.Backend, a.Op, "%s is %s, but %s takes %s memory", name, b, a.Backend, where)
	}
	if !anyKind && !b.Float() {
		return Invalid(a.Backend, a.Op, "%s is %s; this operation sums float32", name, b)
	}
	if want >= 0 && b.Len() != want {
		return Invalid(a.Backend, a.Op, "%s has %d elements, want %d", name, b.Len(), want)
	}
	return nil
}

// Counts checks a per-rank count list and returns its sum.
func (a Args) Counts(name string, c []int) (int, error) {
	if len(c) != a.Size {
		return 0, Invalid(a.Backend, a.Op, "%s has %d entries for %d ranks", name, len(c), a.Size)
	}
	total := 0
	for r, n := range c {
		if n < 0 {
			return 0, Invalid(a.Backend, a.Op, "%s[%d] is %d", name, r, n)
		}
		total += n
	}
	return total, nil
}

// Root checks a broadcast root.
func (a Args) Root(root int) error {
	if root < 0 || root >= a.Size {
		return Invalid(a.Backend, a.Op, "root %d is not a rank of a group of %d", root, a.Size)
	}
	return nil
}

// ReduceScatter checks a reduce-scatter's buffers against counts and
// returns the elements summed (sum of counts).
func (a Args) ReduceScatter(send, recv Buffer, counts []int) (int, error) {
	total, err := a.Counts("counts", counts)
	if err == nil {
		err = a.Buf("send", send, total, false)
	}
	if err == nil {
		err = a.Buf("recv", recv, counts[a.Rank], false)
	}
	return total, err
}

// AllGather checks an all-gather's buffers against counts and returns the
// elements gathered (sum of counts).
func (a Args) AllGather(send, recv Buffer, counts []int) (int, error) {
	total, err := a.Counts("counts", counts)
	if err == nil {
		err = a.Buf("send", send, counts[a.Rank], false)
	}
	if err == nil {
		err = a.Buf("recv", recv, total, false)
	}
	return total, err
}

// AllToAll checks an all-to-all's buffers against their counts.
func (a Args) AllToAll(send Buffer, sendCounts []int, recv Buffer, recvCounts []int) error {
	st, err := a.Counts("sendCounts", sendCounts)
	var rt int
	if err == nil {
		rt, err = a.Counts("recvCounts", recvCounts)
	}
	if err == nil {
		err = a.Buf("send", send, st, false)
	}
	if err == nil {
		err = a.Buf("recv", recv, rt, false)
	}
	return err
}
