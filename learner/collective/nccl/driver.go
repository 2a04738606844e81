package nccl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/libload"
)

// cudaAPI is the part of the CUDA driver the communicator needs: the
// device's primary context, a stream to order NCCL's work on, a scratch
// allocation, and (for the tests) copies.
type cudaAPI struct {
	path string

	cuInit                    func(flags uint32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamDestroy           func(s uintptr) int32
	cuStreamQuery             func(s uintptr) int32
	cuMemAlloc                func(p *uint64, size uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuGetErrorName            func(r int32, s **byte) int32
}

const (
	cudaSuccess         = 0
	cudaErrorNotReady   = 600
	cuStreamNonBlocking = 1
)

var (
	cudaOnce sync.Once
	cudaLib  *cudaAPI
	cudaErr  error
)

// loadCUDA loads libcuda.so.1 and calls cuInit, once per process.
func loadCUDA() (*cudaAPI, error) {
	cudaOnce.Do(func() {
		h, path, err := openLib("libcuda.so.1", libload.DriverCandidates())
		if err != nil {
			cudaErr = fmt.Errorf("collective: nccl: %w: no CUDA driver: %v (set %s to the directory holding it if it is elsewhere)", collective.ErrUnavailable, err, LibPathEnv)
			return
		}
		d := &cudaAPI{path: path}
		for _, b := range []struct {
			fn   any
			name string
		}{
			{&d.cuInit, "cuInit"},
			{&d.cuDeviceGetCount, "cuDeviceGetCount"},
			{&d.cuDeviceGet, "cuDeviceGet"},
			{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
			{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
			{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
			{&d.cuStreamCreate, "cuStreamCreate"},
			{&d.cuStreamDestroy, "cuStreamDestroy_v2"},
			{&d.cuStreamQuery, "cuStreamQuery"},
			{&d.cuMemAlloc, "cuMemAlloc_v2"},
			{&d.cuMemFree, "cuMemFree_v2"},
			{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
			{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
			{&d.cuGetErrorName, "cuGetErrorName"},
		} {
			if err := bind(h, path, b.name, b.fn); err != nil {
				cudaErr = fmt.Errorf("collective: nccl: %w: %v", collective.ErrUnavailable, err)
				return
			}
		}
		if r := d.cuInit(0); r != cudaSuccess {
			cudaErr = fmt.Errorf("collective: nccl: %w: the CUDA driver %s found no usable GPU: %v", collective.ErrUnavailable, path, d.err("cuInit", r))
			return
		}
		cudaLib = d
	})
	return cudaLib, cudaErr
}

// err describes a failed CUresult (nil for CUDA_SUCCESS).
func (d *cudaAPI) err(call string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	name := fmt.Sprintf("CUresult %d", r)
	var s *byte
	if d.cuGetErrorName(r, &s) == cudaSuccess && s != nil {
		name = goString(s)
	}
	return fmt.Errorf("cuda: %s: %s", call, name)
}
