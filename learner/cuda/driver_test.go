package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/optim"
)

// These tests run on every machine.

// TestOpenWithoutDriver: without libcuda.so.1, Open fails with an error
// that says so and names the paths it tried.
func TestOpenWithoutDriver(t *testing.T) {
	if info, err := Driver(); err == nil {
		t.Skipf("a CUDA driver is present (%s, %d devices); this test covers machines without one", info.Path, info.Devices)
	}
	dv, err := Open(0)
	if err == nil {
		dv.Close()
		t.Fatal("Open succeeded without a driver")
	}
	msg := err.Error()
	for _, want := range []string{"no CUDA driver", "libcuda.so.1 not found", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", LibPathEnv} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if _, err2 := Driver(); err2 == nil || err2.Error() != msg {
		t.Errorf("Driver() = %v, want the same error as Open", err2)
	}
}

// TestOpenLibReportsEveryCandidate: a file that is not a library and a
// missing path are both listed with their reasons.
func TestOpenLibReportsEveryCandidate(t *testing.T) {
	dir := t.TempDir()
	bogus := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(bogus, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "absent", "libcuda.so.1")
	_, _, err := openLib("libcuda.so.1", []string{bogus, missing, bogus})
	if err == nil {
		t.Fatal("openLib loaded a text file")
	}
	msg := err.Error()
	if !strings.Contains(msg, "libcuda.so.1 not found") || !strings.Contains(msg, missing+" (absent)") {
		t.Errorf("error %q does not name the missing path", msg)
	}
	if strings.Count(msg, bogus+" (") != 1 {
		t.Errorf("error %q should list the bogus file once, with the loader's reason", msg)
	}
}

// TestLibraryDirsIncludeEnvAndWheels: AIPO_CUDA_LIB_PATH comes first for
// the driver and cuBLAS, and a virtual environment's cuBLAS wheel folders
// (CUDA 12 and 13 layouts) are searched.
func TestLibraryDirsIncludeEnvAndWheels(t *testing.T) {
	extra := t.TempDir()
	venv := t.TempDir()
	wheel12 := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cublas", "lib")
	wheel13 := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	for _, d := range []string{wheel12, wheel13} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(LibPathEnv, extra)
	t.Setenv("VIRTUAL_ENV", venv)
	if c := driverCandidates(); len(c) == 0 || c[0] != filepath.Join(extra, "libcuda.so.1") || !slices.Contains(c, "libcuda.so.1") {
		t.Errorf("driver candidates %v: want %s first and the bare soname", c, extra)
	}
	dirs := cublasDirs()
	if len(dirs) == 0 || dirs[0] != extra {
		t.Errorf("cuBLAS dirs %v: want %s first", dirs, extra)
	}
	i13, i12 := slices.Index(dirs, wheel13), slices.Index(dirs, wheel12)
	if i13 < 0 || i12 < 0 || i13 > i12 {
		t.Errorf("cuBLAS dirs %v: want %s before %s", dirs, wheel13, wheel12)
	}
	// With two Pythons, the newer one's wheels come first.
	old := filepath.Join(venv, "lib", "python3.9", "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	dirs = cublasDirs()
	if iNew, iOld := slices.Index(dirs, wheel13), slices.Index(dirs, old); iNew < 0 || iOld < 0 || iNew > iOld {
		t.Errorf("cuBLAS dirs %v: want python3.12's before python3.9's", dirs)
	}
}

// TestBLASMissingIsClear: without cuBLAS, loadBLAS names the libraries and
// the environment variable.
func TestBLASMissingIsClear(t *testing.T) {
	_, err := loadBLAS()
	if err == nil {
		t.Skip("cuBLAS is installed here")
	}
	msg := err.Error()
	for _, want := range []string{"cuBLAS not found", "libcublas.so.13", "libcublasLt.so.12", LibPathEnv} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var target *Error
	if !errors.As(error(e), &target) || target.Code != 2 {
		t.Error("errors.As does not find *Error")
	}
}

// TestAdamWStepMatchesOptim: NewAdamWStep and ClipScale give the
// constants learner/optim uses. The update of adamw.cu, written out in Go
// below, applied with them must reproduce optim.AdamW.Step bit for bit
// (warmup, cosine decay, clipping and weight decay all active).
func TestAdamWStepMatchesOptim(t *testing.T) {
	cfg := optim.DefaultConfig()
	cfg.LR, cfg.GradClip, cfg.WeightDecay = 1e-3, 1, 0.1
	cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps = optim.ScheduleWarmupCosine, 1, 4
	opt, err := optim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	const n = 3000
	data := randn(r, n, 0.1)
	params := []optim.Param{{Name: "w", Data: data, Grad: make([]float32, n)}}
	p := append([]float32(nil), data...)
	m, v := make([]float32, n), make([]float32, n)
	for step := 0; step < 4; step++ {
		copy(params[0].Grad, randn(r, n, 0.1))
		norm := optim.GradNorm(params)
		s := NewAdamWStep(cfg, opt.Steps(), ClipScale(norm, cfg.GradClip))
		if s.Scale >= 1 {
			t.Fatalf("step %d: clipping inactive (norm %g)", step, norm)
		}
		opt.Step(params)
		for k := range p { // adamw_step
			g := params[0].Grad[k] * s.Scale
			mi := m[k]*s.B1 + s.OneMinusB1*g
			vi := v[k]*s.B2 + s.OneMinusB2*g*g
			m[k], v[k] = mi, vi
			denom := float32(math.Sqrt(float64(vi)))/s.BC2Sqrt + s.Eps
			p[k] = p[k]*s.Decay - s.StepSize*(mi/denom)
		}
		for k := range p {
			if math.Float32bits(p[k]) != math.Float32bits(data[k]) {
				t.Fatalf("step %d, element %d: %g with the GPU's constants, %g from optim", step, k, p[k], data[k])
			}
		}
	}
	if ClipScale(0.5, 1) != 1 || ClipScale(5, 0) != 1 {
		t.Error("ClipScale scales a gradient below the limit or with clipping off")
	}
}
