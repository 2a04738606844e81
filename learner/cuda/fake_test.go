package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/fakecuda"
)

// fakeTests are the GPU tests that testdata/fakecuda.c can serve alone:
// no kernel but residual_forward and scale_f32 is emulated there, and its
// GEMMs are naive.
var fakeTests = []string{
	"TestGPUDeviceInfo", "TestGPUBufferRoundTrip", "TestGPUErrors", "TestGPUConcurrentUse",
	"TestParityGemmF32", "TestParityGemmBF16", "TestParityResidual", "TestGPUProbe", "TestGPUDevices",
	"TestUnplacedPassesHoldNoWeights", "TestUnplacedLoRAHoldsNoBase",
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
	"TestDeviceDataParallel", "TestGPUDecoderMemory", "TestDeviceZero3", "TestDeviceZero3Resume", "TestDeviceZero3Reference", "TestDeviceLoRAZero3",
	"TestDeviceZero3BF16", "TestDeviceLoRAZero3BF16",
	"TestParityLoRAStep", "TestParityLoRAStepBF16",
}

// gpuOnlyTests are the GPU tests that the stand-in driver does not run,
// each with the reason. TestFakeDriverCoversTheGPUTests fails a GPU test
// that is in none of fakeTests, emulatedTests and this list, so that a new
// GPU test cannot be left out of the emulated run unseen.
var gpuOnlyTests = map[string]string{
	"TestGPUGemmThroughput":           "times 4096-cubed GEMMs: a naive host loop takes hours and its figure says nothing",
	"TestGPUTrainStepThroughput":      "a throughput figure of a 0.5B-shaped step, meaningless on the emulator (hours of host loops)",
	"TestGPUTrainStepThroughputQwen3": "a throughput figure of a 0.6B-shaped step, meaningless on the emulator (hours of host loops)",
	"TestGPULMHeadMemory":             "16,384 tokens of a 151,936-token vocabulary through the fused loss: about 2e12 multiply-adds, hours on the emulator",
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
	// A missing C compiler (fakecuda.ErrNoCompiler) fails the test with
	// its reason and the fix, as any other failure to build the stand-ins.
	libs, err := fakecuda.Build(t.TempDir(), ".")
	if err != nil {
		t.Fatal(err)
	}
	dir := libs.Dir
	tests := fakeTests
	if libs.Emulated {
		tests = append(append([]string(nil), fakeTests...), emulatedTests...)
	}
	// Without a C++ compiler the emulated tests cannot run: the test
	// fails saying which and the fix (the stand-in driver's own tests
	// still run and report), rather than passing with a log line.
	if !libs.Emulated {
		t.Errorf("no C++ compiler (c++) to emulate the CUDA kernels: %d of the %d GPU tests cannot run (%s); install g++ (make setup-test does)",
			len(emulatedTests), len(fakeTests)+len(emulatedTests), strings.Join(emulatedTests, ", "))
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
