package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// CUdevice_attribute values used here.
const (
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMultiprocessorCount    = 16
)

// Device is one GPU with its primary context, one stream, the embedded
// kernels and (for Open) a cuBLAS handle. All its work runs on one
// goroutine locked to one OS thread, on which the context is current; the
// methods hand closures to it and wait, so a Device is safe for concurrent
// use (the calls are serialised). Kernel launches and GEMMs are queued on
// the Device's stream; the copies to the host wait for that stream, so
// their results are complete.
//
// Only the GPU tests exercise a Device (they skip without a driver).
type Device struct {
	d       *driverAPI
	ordinal int
	dev     int32
	ctx     uintptr
	stream  uintptr
	name    string
	major   int
	minor   int
	sms     int
	modules []uintptr
	funcs   map[string]uintptr
	blas    *blasAPI
	blasH   uintptr

	mu     sync.Mutex // serialises do and Close
	closed bool
	reqs   chan func()

	memMu     sync.Mutex
	live, top uint64 // bytes held by Alloc'd buffers now and at most

	pool scratchPool
}

// MemStats returns the bytes of device memory held by this Device's
// buffers now and the most held at once since the last ResetPeak (cuBLAS
// and the context hold some more of their own).
func (dv *Device) MemStats() (live, peak uint64) {
	dv.memMu.Lock()
	defer dv.memMu.Unlock()
	return dv.live, dv.top
}

// ResetPeak starts a new peak measurement at the current live bytes.
func (dv *Device) ResetPeak() {
	dv.memMu.Lock()
	dv.top = dv.live
	dv.memMu.Unlock()
}

func (dv *Device) account(delta int64) {
	dv.memMu.Lock()
	dv.live = uint64(int64(dv.live) + delta)
	dv.top = max(dv.top, dv.live)
	dv.memMu.Unlock()
}

// Open opens GPU ordinal (0 for the first) with everything the backend
// needs: the driver, a context, the kernels and cuBLAS. On a machine
// without a GPU it fails with an error naming the libraries and paths that
// were tried.
func Open(ordinal int) (*Device, error) { return open(ordinal, true) }

// open is Open; needBLAS false skips cuBLAS, for the kernel tests.
func open(ordinal int, needBLAS bool) (*Device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var b *blasAPI
	if needBLAS {
		if b, err = loadBLAS(); err != nil {
			return nil, err
		}
	}
	dv := &Device{d: d, ordinal: ordinal, funcs: map[string]uintptr{}, reqs: make(chan func())}
	ready := make(chan error, 1)
	go dv.loop(ready, b)
	if err := <-ready; err != nil {
		return nil, err
	}
	return dv, nil
}

// loop is the Device's goroutine: it locks its OS thread, makes the
// context current, and runs requests until Close. When setup fails it
// returns still locked, so the thread (with whatever state the driver left
// on it) is discarded.
func (dv *Device) loop(ready chan<- error, b *blasAPI) {
	runtime.LockOSThread()
	if err := dv.setup(b); err != nil {
		dv.teardown()
		ready <- fmt.Errorf("cuda: opening device %d: %w", dv.ordinal, err)
		return
	}
	ready <- nil
	for f := range dv.reqs {
		f()
	}
	runtime.UnlockOSThread()
}

func (dv *Device) setup(b *blasAPI) error {
	d := dv.d
	if err := d.err("cuDeviceGet", d.cuDeviceGet(&dv.dev, int32(dv.ordinal))); err != nil {
		return err
	}
	var v int32
	for _, a := range []struct {
		attr int32
		dst  *int
	}{{attrComputeCapabilityMajor, &dv.major}, {attrComputeCapabilityMinor, &dv.minor}, {attrMultiprocessorCount, &dv.sms}} {
		if err := d.err("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a.attr, dv.dev)); err != nil {
			return err
		}
		*a.dst = int(v)
	}
	name := make([]byte, 256)
	if err := d.err("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), dv.dev)); err != nil {
		return err
	}
	dv.name = goString(&name[0])
	if dv.major < 8 {
		return fmt.Errorf("%s has compute capability %d.%d; the kernels need 8.0 or newer (bfloat16)", dv.name, dv.major, dv.minor)
	}
	if err := d.err("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dv.ctx, dv.dev)); err != nil {
		return err
	}
	if err := d.err("cuCtxSetCurrent", d.cuCtxSetCurrent(dv.ctx)); err != nil {
		return err
	}
	// Flags 0: a blocking stream, which the legacy default stream (used by
	// the plain cuMemcpy calls) synchronises with.
	if err := d.err("cuStreamCreate", d.cuStreamCreate(&dv.stream, 0)); err != nil {
		return err
	}
	if err := dv.loadKernels(); err != nil {
		return err
	}
	if b != nil {
		if err := dv.setupBLAS(b); err != nil {
			return err
		}
	}
	return nil
}

// teardown releases what setup acquired; it runs on the Device's thread.
func (dv *Device) teardown() error {
	d := dv.d
	var errs []error
	if dv.blasH != 0 {
		errs = append(errs, dv.blas.err("cublasDestroy_v2", dv.blas.cublasDestroy(dv.blasH)))
		dv.blasH = 0
	}
	for _, m := range dv.modules {
		errs = append(errs, d.err("cuModuleUnload", d.cuModuleUnload(m)))
	}
	dv.modules = nil
	if dv.stream != 0 {
		errs = append(errs, d.err("cuStreamDestroy_v2", d.cuStreamDestroy(dv.stream)))
		dv.stream = 0
	}
	if dv.ctx != 0 {
		errs = append(errs, d.err("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease(dv.dev)))
		dv.ctx = 0
	}
	return errors.Join(errs...)
}

var errClosed = errors.New("cuda: the device is closed")

// do runs f on the Device's thread and returns its error.
func (dv *Device) do(f func() error) error {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.closed {
		return errClosed
	}
	var err error
	done := make(chan struct{})
	dv.reqs <- func() {
		defer close(done)
		err = f()
	}
	<-done
	return err
}

// Close waits for queued work, releases the kernels, the stream, the
// cuBLAS handle and the context, and stops the Device's thread. Buffers
// must be freed before; afterwards their methods return an error.
func (dv *Device) Close() error {
	dv.ReleaseScratch()
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.closed {
		return nil
	}
	var err error
	done := make(chan struct{})
	dv.reqs <- func() {
		defer close(done)
		err = errors.Join(dv.syncLocked(), dv.teardown())
	}
	<-done
	dv.closed = true
	close(dv.reqs)
	return err
}

// syncLocked waits for the stream; it runs on the Device's thread.
func (dv *Device) syncLocked() error {
	return dv.d.err("cuStreamSynchronize", dv.d.cuStreamSynchronize(dv.stream))
}

// Sync waits until every kernel and GEMM queued so far has finished and
// returns the first asynchronous error they raised.
func (dv *Device) Sync() error { return dv.do(dv.syncLocked) }

// Name is the GPU's name, e.g. "NVIDIA H200".
func (dv *Device) Name() string { return dv.name }

// ComputeCapability returns the major and minor compute capability
// (9 and 0 for Hopper).
func (dv *Device) ComputeCapability() (major, minor int) { return dv.major, dv.minor }

// Multiprocessors is the number of streaming multiprocessors.
func (dv *Device) Multiprocessors() int { return dv.sms }

// DriverPath is the libcuda.so.1 in use.
func (dv *Device) DriverPath() string { return dv.d.path }

// MemInfo returns the free and total device memory in bytes.
func (dv *Device) MemInfo() (free, total uint64, err error) {
	err = dv.do(func() error {
		return dv.d.err("cuMemGetInfo_v2", dv.d.cuMemGetInfo(&free, &total))
	})
	return free, total, err
}

// launch queues kernel name with grid×block threads; args are *Buffer
// (passed as its device pointer), int (as a C int), float32 and float64.
// It runs on the caller's side and hands the launch to the Device's
// thread.
func (dv *Device) launch(name string, grid, block uint32, args ...any) error {
	return dv.launch2D(name, grid, 1, block, args...)
}

// launch2D is launch on a grid of gx x gy blocks.
func (dv *Device) launch2D(name string, gx, gy, block uint32, args ...any) error {
	slots := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *Buffer:
			if v != nil { // nil: a null pointer (an optional output)
				slots[i] = v.ptr
			}
		case int:
			if v != int(int32(v)) {
				return fmt.Errorf("cuda: %s: argument %d (%d) overflows a C int", name, i, v)
			}
			slots[i] = uint64(uint32(int32(v)))
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		case float64:
			slots[i] = math.Float64bits(v)
		case uint64:
			slots[i] = v
		default:
			return fmt.Errorf("cuda: %s: argument %d has unsupported type %T", name, i, a)
		}
	}
	if gx == 0 || gy == 0 {
		return nil // nothing to do
	}
	return dv.do(func() error {
		f, ok := dv.funcs[name]
		if !ok {
			return fmt.Errorf("cuda: kernel %s is not loaded", name)
		}
		// cuLaunchKernel reads kernelParams[i], a pointer to argument i's
		// value, during the call. The values live in slots (Go memory), so
		// slots is pinned while its addresses sit in ptrs.
		var pin runtime.Pinner
		defer pin.Unpin()
		ptrs := make([]unsafe.Pointer, len(slots)+1)
		if len(slots) > 0 {
			pin.Pin(&slots[0])
			for i := range slots {
				ptrs[i] = unsafe.Pointer(&slots[i])
			}
		}
		return dv.d.err("cuLaunchKernel "+name, dv.d.cuLaunchKernel(f, gx, gy, 1, block, 1, 1, 0, dv.stream, unsafe.Pointer(&ptrs[0]), nil))
	})
}
