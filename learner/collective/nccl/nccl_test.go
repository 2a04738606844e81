package nccl

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

func TestOpenLibNamesEveryPathTried(t *testing.T) {
	_, _, err := openLib("libnccl.so.2", []string{"/nonexistent/libnccl.so.2", "libaipo-no-such-library.so.9"})
	if err == nil {
		t.Fatal("opened a library that does not exist")
	}
	for _, want := range []string{"libnccl.so.2 not found", "/nonexistent/libnccl.so.2 (absent)", "libaipo-no-such-library.so.9 ("} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// Load either finds NCCL and reports its version, or fails as
// unavailable, saying what to install.
func TestLoad(t *testing.T) {
	info, err := Load()
	if err != nil {
		if !errors.Is(err, collective.ErrUnavailable) || !strings.Contains(err.Error(), "install NCCL 2.23 or newer") || !strings.Contains(err.Error(), "libnccl.so.2") {
			t.Fatalf("error %q should match ErrUnavailable, name libnccl.so.2 and say what to install", err)
		}
		t.Logf("no NCCL here, as expected without a GPU stack: %v", err)
		return
	}
	if info.Path == "" || info.Version < 20000 {
		t.Fatalf("loaded %+v", info)
	}
	t.Logf("loaded %s", info)
}

// The config must have nccl.h's layout, and its header must be what
// NCCL_CONFIG_INITIALIZER writes for the loaded version.
func TestConfigLayout(t *testing.T) {
	var c config
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof", unsafe.Sizeof(c), 96},
		{"magic", unsafe.Offsetof(c.magic), 8},
		{"blocking", unsafe.Offsetof(c.blocking), 16},
		{"netName", unsafe.Offsetof(c.netName), 32},
		{"splitShare", unsafe.Offsetof(c.splitShare), 40},
		{"commName", unsafe.Offsetof(c.commName), 48},
		{"collnetEnable", unsafe.Offsetof(c.collnetEnable), 56},
		{"graphStreamOrdering", unsafe.Offsetof(c.graphStreamOrdering), 92},
	} {
		if f.got != f.want {
			t.Errorf("%s: %d, want %d", f.name, f.got, f.want)
		}
	}
	for v, want := range map[int]uintptr{21403: 24, 21701: 40, 21801: 48, 22304: 48, 22602: 48, 22703: 72, 22803: 80, 22902: 88, 23000: 96} {
		if got := configSize(v); got != want {
			t.Errorf("configSize(%d) = %d, want %d", v, got, want)
		}
	}
	cfg := nonBlockingConfig(22703)
	if cfg.size != 72 || cfg.magic != 0xcafebeef || cfg.version != 22703 || cfg.blocking != 0 || cfg.minCTAs != ncclConfigUndef || cfg.netName != 0 {
		t.Fatalf("config %+v", cfg)
	}
}

// gpuComm opens a one-rank group and an NCCL communicator on GPU 0, or
// skips with the reason when this machine has no GPU stack (unless
// AIPO_REQUIRE_GPU=1, which scripts/gpu-check.sh sets).
func gpuComm(t *testing.T) *Comm {
	t.Helper()
	_, errN := Load()
	_, errC := loadCUDA()
	if err := errors.Join(errN, errC); err != nil {
		if os.Getenv("AIPO_REQUIRE_GPU") == "1" {
			t.Fatalf("AIPO_REQUIRE_GPU=1 but %v", err)
		}
		short, _, _ := strings.Cut(err.Error(), "; tried")
		t.Skipf("no GPU: %s", short)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx := context.Background()
	g, err := collective.Join(ctx, collective.Env{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: port},
		collective.Options{RendezvousTimeout: 30 * time.Second, OpTimeout: 30 * time.Second, CloseTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	c, err := New(ctx, g, Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

func TestGPUNCCLOneRank(t *testing.T) {
	c := gpuComm(t)
	info, _ := Load()
	t.Logf("%s, one rank", info)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up := func(v []float32) collective.DeviceFloat32s {
		b, err := c.upload(v)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.free(b) })
		return b
	}
	down := func(b collective.DeviceFloat32s) []float32 {
		v, err := c.download(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	seq := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i%1000 - 500)
		}
		return v
	}
	same := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d elements, want %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: element %d is %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	for _, n := range []int{0, 1, 1001, 16 << 20} { // 16 Mi floats: 64 MiB
		b := up(seq(n))
		start := time.Now()
		if err := c.AllReduce(ctx, b); err != nil {
			t.Fatal(err)
		}
		if n == 16<<20 {
			t.Logf("all-reduce of 64 MiB on one rank: %.2f ms", float64(time.Since(start).Microseconds())/1000)
		}
		same("allreduce", down(b), seq(n))
	}
	src, dst := up(seq(777)), up(make([]float32, 777))
	if err := c.ReduceScatter(ctx, src, dst, []int{777}); err != nil {
		t.Fatal(err)
	}
	same("reducescatter", down(dst), seq(777))
	dst2 := up(make([]float32, 777))
	if err := c.AllGather(ctx, src, dst2, []int{777}); err != nil {
		t.Fatal(err)
	}
	same("allgather", down(dst2), seq(777))
	dst3 := up(make([]float32, 777))
	if err := c.AllToAll(ctx, src, []int{777}, dst3, []int{777}); err != nil {
		t.Fatal(err)
	}
	same("alltoall", down(dst3), seq(777))
	if err := c.Broadcast(ctx, src, 0); err != nil {
		t.Fatal(err)
	}
	same("broadcast", down(src), seq(777))
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// Host memory is refused with a clear error, and the comm still works.
	if err := c.AllReduce(ctx, collective.Float32s{1}); !errors.Is(err, collective.ErrInvalid) || !strings.Contains(err.Error(), "takes device memory") {
		t.Fatalf("host buffer: %v", err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// After Abort every call fails as aborted.
	c.Abort(errors.New("test abort"))
	if err := c.Barrier(ctx); !errors.Is(err, collective.ErrAborted) {
		t.Fatalf("after Abort: %v", err)
	}
}

// TestGPUNCCLGroup runs the collectives rank program (every collective,
// checked against the plain computation within 1e-5 relative: a real
// NCCL adds in its own order) with a rank a GPU, up to 4, in processes of
// their own: on a one-GPU machine one rank, as NCCL refuses two ranks on
// one GPU. The binary scripts/gpu-check.sh carries has no cgo and so no
// Gloo to compare with.
func TestGPUNCCLGroup(t *testing.T) {
	_, errN := Load()
	cu, errC := loadCUDA()
	if err := errors.Join(errN, errC); err != nil {
		if os.Getenv("AIPO_REQUIRE_GPU") == "1" {
			t.Fatalf("AIPO_REQUIRE_GPU=1 but %v", err)
		}
		short, _, _ := strings.Cut(err.Error(), "; tried")
		t.Skipf("no GPU: %s", short)
	}
	var n int32
	if err := cu.err("cuDeviceGetCount", cu.cuDeviceGetCount(&n)); err != nil {
		t.Fatal(err)
	}
	ranks := min(int(n), 4)
	if ranks < 1 {
		t.Fatal("the driver sees no device")
	}
	rs := disttest.Launch(t, disttest.Spec{Program: "collectives", Size: ranks})
	for _, e := range rs.Wait(2 * time.Minute) {
		if e.Code != 0 || !strings.Contains(e.Output, "collectives ok") {
			t.Fatalf("%d ranks: rank %d exited %d:\n%s", ranks, e.Rank, e.Code, e.Output)
		}
		if e.Rank == 0 {
			t.Logf("%d ranks, a GPU each: %s", ranks, lineWith(e.Output, "collectives ok"))
		}
	}
}
