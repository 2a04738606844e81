package cuda

import (
	"github.com/aipo-rl/aipo/learner/internal/disttest"

	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"
)

// The GPU tests (TestGPU*) and the kernel parity tests (TestParity*) need a
// CUDA driver and device. Without a driver they skip with the loader's
// reason, unless AIPO_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it), which
// turns the skip into a failure so that a GPU run cannot pass by skipping.
// Any other failure to open the device fails the test.

var (
	sharedMu   sync.Mutex
	sharedDevs = map[bool]*Device{}
)

func TestMain(m *testing.M) {
	// The rank processes of TestDeviceDataParallel.
	disttest.Dispatch(map[string]func() int{"dpdevice": programDPDevice})
	code := m.Run()
	liveFake := fakeLiveAllocations()
	// KV caches and decoders free their device buffers from runtime
	// cleanups once unreachable (decoder.go), which run some time after a
	// collection: collect until the stand-in driver counts none live (5 s
	// at most), and before the devices close, so that the count below
	// measures leaks, not the collector's schedule.
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		if liveFake == nil || liveFake() == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, dv := range sharedDevs {
		if err := dv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the device:", err)
			code = 1
		}
	}
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") == "1" && code == 0 {
		// The stand-in driver counts its live allocations: every buffer
		// the tests made must have been freed.
		if liveFake == nil {
			fmt.Fprintln(os.Stderr, "stand-in driver without fake_live_allocations")
			code = 1
		} else if live := liveFake(); live != 0 {
			fmt.Fprintf(os.Stderr, "%d device allocations were not freed\n", live)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeLiveAllocations returns the stand-in driver's count of live device
// allocations, or nil outside TestFakeDriver's child (or when the loaded
// libcuda is not the stand-in).
func fakeLiveAllocations() func() int64 {
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") != "1" {
		return nil
	}
	sym, err := purego.Dlsym(purego.RTLD_DEFAULT, "fake_live_allocations")
	if err != nil {
		return nil
	}
	return func() int64 {
		live, _, _ := purego.SyscallN(sym)
		return int64(live)
	}
}

// gpu returns the shared device (with cuBLAS when blas is true), opening
// it on first use, or skips the test when there is no driver.
func gpu(t *testing.T, blas bool) *Device {
	t.Helper()
	needDriver(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if dv := sharedDevs[blas]; dv != nil {
		return dv
	}
	dv, err := open(0, blas)
	if err != nil {
		t.Fatalf("a driver is present but the device does not open: %v", err)
	}
	sharedDevs[blas] = dv
	return dv
}

// needDriver skips the test when there is no CUDA driver, or fails it
// when AIPO_REQUIRE_GPU=1.
func needDriver(t *testing.T) {
	t.Helper()
	if _, err := Driver(); err != nil {
		if os.Getenv("AIPO_REQUIRE_GPU") == "1" {
			t.Fatalf("AIPO_REQUIRE_GPU=1 but %v", err)
		}
		short, _, _ := strings.Cut(err.Error(), "; tried")
		t.Skipf("no GPU: %s", short)
	}
}

// ownGPU opens a device of the test's own, closed when it ends, for the
// tests that compare MemStats before and after: on the shared device the
// cleanup of a decoder or cache that an earlier test dropped may free its
// buffers at any moment and change the live bytes between two readings.
func ownGPU(t *testing.T) *Device {
	t.Helper()
	needDriver(t)
	dv, err := Open(0)
	if err != nil {
		t.Fatalf("a driver is present but a second context does not open: %v", err)
	}
	t.Cleanup(func() { dv.Close() })
	return dv
}

// upload, alloc and download fail the test on error; buffers are freed at
// the end of the test.
func upload(t *testing.T, dv *Device, x []float32) *Buffer {
	t.Helper()
	b, err := dv.Upload(x)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

func uploadI32(t *testing.T, dv *Device, x []int32) *Buffer {
	t.Helper()
	b := alloc(t, dv, I32, len(x))
	if err := b.CopyFromInt32(x); err != nil {
		t.Fatal(err)
	}
	return b
}

func uploadBF16(t *testing.T, dv *Device, x []uint16) *Buffer {
	t.Helper()
	b := alloc(t, dv, BF16, len(x))
	if err := b.CopyFromUint16(x); err != nil {
		t.Fatal(err)
	}
	return b
}

func alloc(t *testing.T, dv *Device, dt DType, n int) *Buffer {
	t.Helper()
	b, err := dv.Alloc(dt, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

func download(t *testing.T, b *Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len())
	if err := b.CopyToFloat32(out); err != nil {
		t.Fatal(err)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randn(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

// closeTo checks |got-want| <= atol + rtol*|want| element-wise and reports
// the worst elements. rtol 0 and atol 0 demand bit equality (NaN equal to
// NaN).
func closeTo(t *testing.T, name string, got, want []float32, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	bad, worst, worstI, maxDiff := 0, 0.0, -1, 0.0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) && math.IsNaN(w) {
			continue
		}
		d := math.Abs(g - w)
		maxDiff = math.Max(maxDiff, d)
		if rtol == 0 && atol == 0 {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				bad++
				if worstI < 0 {
					worstI = i
				}
			}
			continue
		}
		if !(d <= atol+rtol*math.Abs(w)) {
			bad++
		}
		if ex := d / (atol + rtol*math.Abs(w)); ex > worst || math.IsNaN(d) {
			worst, worstI = ex, i
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values out of tolerance (rtol %g, atol %g); worst at %d: got %g, want %g",
			name, bad, len(got), rtol, atol, worstI, got[worstI], want[worstI])
	} else {
		t.Logf("%s: %d values within tolerance (rtol %g, atol %g; worst %.3g of it, max |diff| %.3g)", name, len(got), rtol, atol, worst, maxDiff)
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

func TestGPUDeviceInfo(t *testing.T) {
	dv := gpu(t, true)
	info, err := Driver()
	must(t, err)
	major, minor := dv.ComputeCapability()
	free, total, err := dv.MemInfo()
	must(t, err)
	path, ltPath, ver, ltVer, err := dv.BLASInfo()
	must(t, err)
	t.Logf("driver %s version %d, %d devices; device 0: %s, sm_%d%d, %d SMs, %.1f of %.1f GiB free",
		info.Path, info.Version, info.Devices, dv.Name(), major, minor, dv.Multiprocessors(), float64(free)/(1<<30), float64(total)/(1<<30))
	t.Logf("cuBLAS %d (%s), cuBLASLt %d (%s)", ver, path, ltVer, ltPath)
	if dv.Name() == "" || major < 8 || dv.Multiprocessors() <= 0 || total == 0 || free > total || ver <= 0 {
		t.Errorf("implausible device report")
	}
}

func TestGPUBufferRoundTrip(t *testing.T) {
	dv := gpu(t, false)
	r := rand.New(rand.NewPCG(1, 2))
	x := randn(r, 1001, 3)
	b := upload(t, dv, x)
	closeTo(t, "f32 round trip", download(t, b), x, 0, 0)

	h := make([]uint16, 777)
	for i := range h {
		h[i] = uint16(r.Uint32())
	}
	hb := uploadBF16(t, dv, h)
	hOut := make([]uint16, len(h))
	must(t, hb.CopyToUint16(hOut))
	for i := range h {
		if h[i] != hOut[i] {
			t.Fatalf("bf16 round trip: element %d is %#x, want %#x", i, hOut[i], h[i])
		}
	}

	ids := []int32{0, -1, 1 << 30, 42}
	ib := uploadI32(t, dv, ids)
	idsOut := make([]int32, len(ids))
	must(t, ib.CopyToInt32(idsOut))
	for i := range ids {
		if ids[i] != idsOut[i] {
			t.Fatalf("i32 round trip: %v, want %v", idsOut, ids)
		}
	}

	// A view reads and writes its part of the parent.
	v, err := b.Slice(10, 20)
	must(t, err)
	part := download(t, v)
	closeTo(t, "view", part, x[10:20], 0, 0)
	must(t, v.CopyFromFloat32(make([]float32, 10)))
	all := download(t, b)
	for i, g := range all {
		want := x[i]
		if i >= 10 && i < 20 {
			want = 0
		}
		if g != want {
			t.Fatalf("after writing the view, element %d is %g, want %g", i, g, want)
		}
	}
	if v.Free() == nil {
		t.Error("Free of a view succeeded")
	}

	must(t, b.Zero())
	for i, g := range download(t, b) {
		if g != 0 {
			t.Fatalf("after Zero element %d is %g", i, g)
		}
	}
}

func TestGPUErrors(t *testing.T) {
	dv := gpu(t, false)
	b := alloc(t, dv, F32, 8)
	if err := b.CopyFromFloat32(make([]float32, 7)); err == nil {
		t.Error("copy of 7 values into 8 succeeded")
	}
	if err := b.CopyFromUint16(make([]uint16, 8)); err == nil {
		t.Error("bf16 copy into an f32 buffer succeeded")
	}
	if _, err := b.Slice(4, 9); err == nil {
		t.Error("out-of-range Slice succeeded")
	}
	// A real driver error: far more memory than any GPU has.
	_, err := dv.Alloc(F32, 1<<50)
	var ce *Error
	if !errors.As(err, &ce) || ce.Call != "cuMemAlloc_v2" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("huge Alloc: %v, want a cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY *Error", err)
	} else {
		t.Logf("huge Alloc: %v", err)
	}
	if err := dv.launch("no_such_kernel", 1, 32); err == nil {
		t.Error("launching an unknown kernel succeeded")
	}
	// The device still works after the errors.
	x := []float32{1, 2, 3}
	closeTo(t, "after errors", download(t, upload(t, dv, x)), x, 0, 0)
	must(t, dv.Sync())
}

// TestGPUConcurrentUse: goroutines share the device; the calls are
// serialised on its thread and each sees its own data.
func TestGPUConcurrentUse(t *testing.T) {
	dv := gpu(t, false)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			x := make([]float32, 4096)
			for i := range x {
				x[i] = float32(g*10000 + i)
			}
			for rep := 0; rep < 20; rep++ {
				b, err := dv.Upload(x)
				if err != nil {
					errs <- err
					return
				}
				y := make([]float32, len(x))
				out, err := dv.Alloc(F32, len(x))
				if err == nil {
					err = dv.ResidualForward(out, b, b)
				}
				if err == nil {
					err = out.CopyToFloat32(y)
				}
				b.Free()
				out.Free()
				if err != nil {
					errs <- err
					return
				}
				for i := range y {
					if y[i] != 2*x[i] {
						errs <- fmt.Errorf("goroutine %d: element %d is %g, want %g", g, i, y[i], 2*x[i])
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
