package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTests are the GPU tests that testdata/fakecuda.c can serve: no kernel
// but residual_forward and scale_f32 is emulated, and its GEMMs are naive.
var fakeTests = []string{
	"TestGPUDeviceInfo", "TestGPUBufferRoundTrip", "TestGPUErrors", "TestGPUConcurrentUse",
	"TestParityGemmF32", "TestParityGemmBF16", "TestParityResidual",
}

// TestFakeDriver runs fakeTests in a child process against host-memory
// stand-ins for libcuda, libcublas and libcublasLt built from
// testdata/fakecuda.c. It checks what can be checked without a GPU: the
// purego bindings and their argument types, that every call comes from the
// thread that owns the context (the stand-ins fail otherwise), the buffer
// copies, that the row-major Gemm arguments map onto column-major cuBLAS
// correctly, the kernel-argument marshalling of cuLaunchKernel, that the
// embedded PTX reaches the driver NUL-terminated with every kernel an
// entry, and the naming of driver errors. It says nothing about the
// kernels themselves, which only the Parity tests on a GPU check.
func TestFakeDriver(t *testing.T) {
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") == "1" {
		t.Skip("inside the child process")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in libraries")
	}
	dir := t.TempDir()
	for _, lib := range []struct{ def, name string }{
		{"FAKE_CUDA", "libcuda.so.1"}, {"FAKE_CUBLAS", "libcublas.so.13"}, {"FAKE_CUBLASLT", "libcublasLt.so.13"},
	} {
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-D"+lib.def, "-o", filepath.Join(dir, lib.name),
			filepath.Join("testdata", "fakecuda.c"), "-lpthread").CombinedOutput()
		if err != nil {
			t.Fatalf("building %s: %v\n%s", lib.name, err, out)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.v", "-test.count=1", "-test.run", "^("+strings.Join(fakeTests, "|")+")$")
	cmd.Env = append(os.Environ(), LibPathEnv+"="+dir, "AIPO_REQUIRE_GPU=1", "AIPO_FAKE_CUDA_CHILD=1")
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("the GPU tests failed against the stand-in driver: %v\n%s", err, log)
	}
	for _, name := range fakeTests {
		if !strings.Contains(log, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass against the stand-in driver", name)
		}
	}
	if !strings.Contains(log, "fake CUDA device") || !strings.Contains(log, filepath.Join(dir, "libcublas.so.13")) {
		t.Errorf("the child did not use the stand-in libraries:\n%s", log)
	}
	if t.Failed() {
		t.Log(log)
	}
}
