package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fakeTests are the GPU tests that testdata/fakecuda.c can serve alone:
// no kernel but residual_forward and scale_f32 is emulated there, and its
// GEMMs are naive.
var fakeTests = []string{
	"TestGPUDeviceInfo", "TestGPUBufferRoundTrip", "TestGPUErrors", "TestGPUConcurrentUse",
	"TestParityGemmF32", "TestParityGemmBF16", "TestParityResidual", "TestGPUProbe", "TestGPUDevices",
	"TestGPUDecoderMemory",
}

// emulatedTests join fakeTests when the stand-in driver is linked with the
// kernel emulator (testdata/emu), which runs kernels/*.cu themselves on the
// host: every parity test whose sizes a naive host GEMM and one fiber per
// GPU thread finish in seconds.
var emulatedTests = []string{
	"TestParityRMSNorm", "TestParitySwiGLU", "TestParityRoPE", "TestParityEmbedding", "TestParityCast",
	"TestParityGradNorm", "TestParityAdamW", "TestParityAttention", "TestParityLMHead", "TestParityKL",
	"TestParityModelStep", "TestParityModelStepBF16", "TestParityGreedyDecode", "TestGPUScratchReuse",
	"TestParityModelStepLlama3", "TestParityGreedyDecodeLlama3", "TestParityModelStepRolloutCorrection",
	"TestParityDeviceOptimizer", "TestDeviceTrainingStepStaysOnTheDevice", "TestFrozenModelHoldsWeightsOnly",
	"TestGPUCheckpointingGradientsBitIdentical", "TestPassBytesIsTheDevicePeak",
	"TestParityQKNorm", "TestParityModelStepQwen3", "TestParityModelStepQwen3BF16",
	"TestParityGreedyDecodeQwen3", "TestParityDecodeLogitsQwen3", "TestParityDecodeBF16",
}

// TestFakeDriver runs fakeTests in a child process against host-memory
// stand-ins for libcuda, libcublas and libcublasLt built from
// testdata/fakecuda.c. It checks what can be checked without a GPU: the
// purego bindings and their argument types, that every call comes from the
// thread that owns the context (the stand-ins fail otherwise), the buffer
// copies, that the row-major Gemm arguments map onto column-major cuBLAS
// correctly, the kernel-argument marshalling of cuLaunchKernel, that the
// embedded PTX reaches the driver NUL-terminated with every kernel an
// entry, and the naming of driver errors.
//
// With a C++ compiler, the stand-in libcuda also links testdata/emu, which
// compiles kernels/*.cu as host C++ (one fiber per GPU thread, barriers as
// fiber switches) and runs them for cuLaunchKernel; then the parity tests
// of emulatedTests run too: the kernels' own source, launched through the
// real Go wrappers, against the CPU code. What only a GPU shows (speed,
// register and shared-memory limits, the tensor cores' rounding) stays for
// scripts/gpu-check.sh.
func TestFakeDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stand-in CUDA libraries and runs the GPU tests on them, every kernel emulated (minutes)")
	}
	if os.Getenv("AIPO_FAKE_CUDA_CHILD") == "1" {
		t.Skip("inside the child process")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in libraries")
	}
	dir := t.TempDir()
	build := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	for _, lib := range []struct{ def, name string }{{"FAKE_CUBLAS", "libcublas.so.13"}, {"FAKE_CUBLASLT", "libcublasLt.so.13"}} {
		build(cc, "-shared", "-fPIC", "-O2", "-D"+lib.def, "-o", filepath.Join(dir, lib.name), filepath.Join("testdata", "fakecuda.c"), "-lpthread")
	}
	tests := fakeTests
	libcuda := filepath.Join(dir, "libcuda.so.1")
	if cxx, err := exec.LookPath("c++"); err != nil {
		t.Logf("no C++ compiler: kernels are not emulated, only %v run", fakeTests)
		build(cc, "-shared", "-fPIC", "-O2", "-DFAKE_CUDA", "-o", libcuda, filepath.Join("testdata", "fakecuda.c"), "-lpthread")
	} else {
		registry := filepath.Join(dir, "registry.cpp")
		if err := os.WriteFile(registry, []byte(emulatorRegistry(t)), 0o644); err != nil {
			t.Fatal(err)
		}
		fake, emu, reg := filepath.Join(dir, "fake.o"), filepath.Join(dir, "emu.o"), filepath.Join(dir, "registry.o")
		build(cc, "-c", "-fPIC", "-O2", "-DFAKE_CUDA", "-o", fake, filepath.Join("testdata", "fakecuda.c"))
		build(cxx, "-c", "-fPIC", "-O1", "-std=c++17", "-o", emu, filepath.Join("testdata", "emu", "cudaemu.cpp"))
		build(cxx, "-c", "-fPIC", "-O1", "-std=c++17", "-o", reg, registry)
		build(cxx, "-shared", "-o", libcuda, fake, emu, reg, "-lpthread")
		tests = append(append([]string(nil), fakeTests...), emulatedTests...)
	}
	fakeTests := tests
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
	// With -v the child's whole log: the parity tests' worst differences.
	if t.Failed() || testing.Verbose() {
		t.Log(log)
		return
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "--- PASS") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// emulatorRegistry is the C++ that includes every kernel module's source
// after cudaemu.h and lists its kernels for emu_launch.
func emulatorRegistry(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for m := range kernelModules {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	var b strings.Builder
	fmt.Fprintf(&b, "#include %q\n", filepath.Join(root, "testdata", "emu", "cudaemu.h"))
	n := 0
	for _, m := range mods {
		fmt.Fprintf(&b, "#include %q\n", filepath.Join(root, "kernels", m+".cu"))
	}
	b.WriteString("extern const emu_entry emu_kernels[] = {\n")
	for _, m := range mods {
		for _, k := range kernelModules[m] {
			fmt.Fprintf(&b, "    {%q, emu_invoker(%s)},\n", k, k)
			n++
		}
	}
	fmt.Fprintf(&b, "};\nextern const int emu_nkernels = %d;\n", n)
	return b.String()
}
