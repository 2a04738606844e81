package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Error is a failed call to the CUDA driver or to cuBLAS.
type Error struct {
	Call string // the library function, e.g. "cuMemAlloc_v2"
	Code int    // its CUresult or cublasStatus_t
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // the library's description, when it has one
}

func (e *Error) Error() string {
	if e.Desc != "" && e.Desc != e.Name {
		return fmt.Sprintf("cuda: %s: %s (%s)", e.Call, e.Name, e.Desc)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Call, e.Name)
}

// driverAPI holds the driver functions, bound once per process.
type driverAPI struct {
	path string // the libcuda that was loaded

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuMemAlloc                func(p *uint64, size uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuMemcpyDtoD              func(dst, src uint64, n uint64) int32
	cuMemsetD8                func(dst uint64, v uint8, n uint64) int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamDestroy           func(s uintptr) int32
	cuStreamSynchronize       func(s uintptr) int32
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) int32
	cuModuleUnload            func(m uintptr) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name *byte) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) int32
	cuGetErrorName            func(res int32, s **byte) int32
	cuGetErrorString          func(res int32, s **byte) int32
}

var (
	driverOnce sync.Once
	driver     *driverAPI
	driverErr  error
)

// loadDriver loads libcuda.so.1, binds the functions and calls cuInit, once
// per process. Without a driver it returns an error that starts with
// "no CUDA driver" and lists every path tried.
func loadDriver() (*driverAPI, error) {
	driverOnce.Do(func() {
		h, path, err := openLib("libcuda.so.1", driverCandidates())
		if err != nil {
			driverErr = fmt.Errorf("cuda: no CUDA driver: %w (set %s to the directory holding it if it is elsewhere)", err, LibPathEnv)
			return
		}
		d := &driverAPI{path: path}
		for _, b := range []struct {
			fn   any
			name string
		}{
			{&d.cuInit, "cuInit"},
			{&d.cuDriverGetVersion, "cuDriverGetVersion"},
			{&d.cuDeviceGetCount, "cuDeviceGetCount"},
			{&d.cuDeviceGet, "cuDeviceGet"},
			{&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
			{&d.cuDeviceGetName, "cuDeviceGetName"},
			{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
			{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
			{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
			{&d.cuMemAlloc, "cuMemAlloc_v2"},
			{&d.cuMemFree, "cuMemFree_v2"},
			{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
			{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
			{&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2"},
			{&d.cuMemsetD8, "cuMemsetD8_v2"},
			{&d.cuMemGetInfo, "cuMemGetInfo_v2"},
			{&d.cuStreamCreate, "cuStreamCreate"},
			{&d.cuStreamDestroy, "cuStreamDestroy_v2"},
			{&d.cuStreamSynchronize, "cuStreamSynchronize"},
			{&d.cuModuleLoadData, "cuModuleLoadData"},
			{&d.cuModuleUnload, "cuModuleUnload"},
			{&d.cuModuleGetFunction, "cuModuleGetFunction"},
			{&d.cuLaunchKernel, "cuLaunchKernel"},
			{&d.cuGetErrorName, "cuGetErrorName"},
			{&d.cuGetErrorString, "cuGetErrorString"},
		} {
			if err := bind(h, path, b.name, b.fn); err != nil {
				driverErr = err
				return
			}
		}
		if r := d.cuInit(0); r != 0 {
			driverErr = fmt.Errorf("cuda: the driver %s loaded but found no usable GPU: %w", path, d.err("cuInit", r))
			return
		}
		driver = d
	})
	return driver, driverErr
}

// bind looks name up in the library and points fn (a pointer to a func
// variable) at it; a missing symbol is an error, not a panic, because an
// old driver or cuBLAS may lack it.
func bind(h uintptr, lib, name string, fn any) error {
	sym, err := purego.Dlsym(h, name)
	if err != nil || sym == 0 {
		return fmt.Errorf("cuda: %s has no %s (too old?): %v", lib, name, err)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}

// err turns a CUresult into an *Error (nil for CUDA_SUCCESS).
func (d *driverAPI) err(call string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: fmt.Sprintf("CUresult %d", r)}
	var s *byte
	if d.cuGetErrorName(r, &s) == 0 && s != nil {
		e.Name = goString(s)
	}
	s = nil
	if d.cuGetErrorString(r, &s) == 0 && s != nil {
		e.Desc = goString(s)
	}
	return e
}

// goString copies a NUL-terminated C string owned by a library.
func goString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// cString returns s as a NUL-terminated byte slice for a C call.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// DriverInfo describes the loaded driver without opening a device.
type DriverInfo struct {
	Path    string // the libcuda.so.1 that was loaded
	Version int    // cuDriverGetVersion: 1000*major + 10*minor, e.g. 13000
	Devices int    // cuDeviceGetCount
}

// Driver loads the CUDA driver if it has not been loaded yet and reports
// it; without one it returns the error Open would.
func Driver() (DriverInfo, error) {
	d, err := loadDriver()
	if err != nil {
		return DriverInfo{}, err
	}
	info := DriverInfo{Path: d.path}
	var v, n int32
	if err := d.err("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return info, err
	}
	if err := d.err("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return info, err
	}
	info.Version, info.Devices = int(v), int(n)
	return info, nil
}
