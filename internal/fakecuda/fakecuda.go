// Package fakecuda builds the host stand-ins for the CUDA driver and
// cuBLAS (learner/cuda/testdata/fakecuda.c) with which the CUDA backend
// runs in tests on a machine without a GPU: device memory is host memory,
// the GEMMs are naive loops and, when a C++ compiler is at hand, the
// kernels themselves run on the host (learner/cuda/testdata/emu compiles
// kernels/*.cu as C++, one fiber per GPU thread). A process finds the
// stand-ins when learner/cuda's library path variable (AIPO_CUDA_LIB_PATH)
// names the directory Build filled.
//
// The directory also holds the stand-in NCCL (libnccl.so.2, from
// learner/collective/nccl/testdata/fakenccl.c), which runs NCCL's calls
// between the processes of one machine over sockets, moving the stand-in
// driver's device memory (host memory of each process): with it the
// learner's multi-rank device paths run without a GPU.
package fakecuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Libs is a directory of stand-in libraries.
type Libs struct {
	// Dir holds libcuda.so.1, libcublas.so.13, libcublasLt.so.13 and
	// libnccl.so.2.
	Dir string
	// Emulated says that the stand-in driver runs the kernels (a C++
	// compiler was found); without it only residual_forward and scale_f32
	// are emulated, in C.
	Emulated bool
}

// ErrNoCompiler is returned by Build when there is no C compiler (cc).
var ErrNoCompiler = errors.New("fakecuda: no C compiler (cc) to build the stand-in libraries; install gcc and g++ (make setup-test does)")

// Build compiles the stand-ins into dir from the CUDA backend's sources in
// cudaDir (the learner/cuda directory): its testdata, and its kernels,
// listed by the entries of the committed PTX (ptx/<module>.ptx).
func Build(dir, cudaDir string) (Libs, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return Libs{}, ErrNoCompiler
	}
	src := filepath.Join(cudaDir, "testdata", "fakecuda.c")
	run := func(name string, args ...string) error {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("fakecuda: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	// The GEMMs are -O3 so that the compiler vectorizes a column's sums
	// (fakecuda.c's gemm), and -ffp-contract=off so that each stays the
	// naive loop's: products rounded, then added in order.
	for _, lib := range []struct{ def, name string }{{"FAKE_CUBLAS", "libcublas.so.13"}, {"FAKE_CUBLASLT", "libcublasLt.so.13"}} {
		if err := run(cc, "-shared", "-fPIC", "-O3", "-ffp-contract=off", "-D"+lib.def, "-o", filepath.Join(dir, lib.name), src, "-lpthread"); err != nil {
			return Libs{}, err
		}
	}
	libcuda := filepath.Join(dir, "libcuda.so.1")
	cxx, err := exec.LookPath("c++")
	if err != nil {
		if err := run(cc, "-shared", "-fPIC", "-O2", "-DFAKE_CUDA", "-o", libcuda, src, "-lpthread", "-ldl"); err != nil {
			return Libs{}, err
		}
		return Libs{Dir: dir}, BuildNCCL(dir, ncclDir(cudaDir))
	}
	registry, err := emulatorRegistry(cudaDir)
	if err != nil {
		return Libs{}, err
	}
	regSrc := filepath.Join(dir, "registry.cpp")
	if err := os.WriteFile(regSrc, []byte(registry), 0o644); err != nil {
		return Libs{}, err
	}
	fake, emu, reg := filepath.Join(dir, "fake.o"), filepath.Join(dir, "emu.o"), filepath.Join(dir, "registry.o")
	for _, args := range [][]string{
		{cc, "-c", "-fPIC", "-O2", "-DFAKE_CUDA", "-o", fake, src},
		{cxx, "-c", "-fPIC", "-O1", "-std=c++17", "-o", emu, filepath.Join(cudaDir, "testdata", "emu", "cudaemu.cpp")},
		{cxx, "-c", "-fPIC", "-O1", "-std=c++17", "-o", reg, regSrc},
		{cxx, "-shared", "-o", libcuda, fake, emu, reg, "-lpthread", "-ldl"},
	} {
		if err := run(args[0], args[1:]...); err != nil {
			return Libs{}, err
		}
	}
	return Libs{Dir: dir, Emulated: true}, BuildNCCL(dir, ncclDir(cudaDir))
}

// ncclDir is learner/collective/nccl beside learner/cuda.
func ncclDir(cudaDir string) string { return filepath.Join(cudaDir, "..", "collective", "nccl") }

// BuildDriver compiles the stand-in CUDA driver alone into dir
// (libcuda.so.1 from cudaDir/testdata/fakecuda.c, in C, without the
// kernel emulator): device memory, copies, streams and contexts, what
// the communicator of learner/collective/nccl needs beside NCCL.
func BuildDriver(dir, cudaDir string) error {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return ErrNoCompiler
	}
	src := filepath.Join(cudaDir, "testdata", "fakecuda.c")
	args := []string{"-shared", "-fPIC", "-O2", "-DFAKE_CUDA", "-o", filepath.Join(dir, "libcuda.so.1"), src, "-lpthread", "-ldl"}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("fakecuda: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return nil
}

// BuildNCCL compiles the stand-in NCCL (ncclDir/testdata/fakenccl.c,
// ncclDir being learner/collective/nccl) into dir as libnccl.so.2. Its
// reductions must add in the order the source states, so the compiler
// may not contract or reassociate them (-ffp-contract=off, no
// -ffast-math).
func BuildNCCL(dir, ncclDir string) error {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return ErrNoCompiler
	}
	src := filepath.Join(ncclDir, "testdata", "fakenccl.c")
	args := []string{"-shared", "-fPIC", "-O2", "-ffp-contract=off", "-o", filepath.Join(dir, "libnccl.so.2"), src, "-lpthread"}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("fakecuda: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return nil
}

var entry = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)

// emulatorRegistry is the C++ that includes every kernel module's source
// after cudaemu.h and lists its kernels (its PTX's entries) for
// emu_launch.
func emulatorRegistry(cudaDir string) (string, error) {
	root, err := filepath.Abs(cudaDir)
	if err != nil {
		return "", err
	}
	ptx, err := filepath.Glob(filepath.Join(root, "ptx", "*.ptx"))
	if err != nil || len(ptx) == 0 {
		return "", fmt.Errorf("fakecuda: no PTX modules in %s (%v)", filepath.Join(root, "ptx"), err)
	}
	sort.Strings(ptx)
	var b strings.Builder
	fmt.Fprintf(&b, "#include %q\n", filepath.Join(root, "testdata", "emu", "cudaemu.h"))
	var kernels []string
	for _, p := range ptx {
		module := strings.TrimSuffix(filepath.Base(p), ".ptx")
		fmt.Fprintf(&b, "#include %q\n", filepath.Join(root, "kernels", module+".cu"))
		text, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		for _, m := range entry.FindAllSubmatch(text, -1) {
			kernels = append(kernels, string(m[1]))
		}
	}
	b.WriteString("extern const emu_entry emu_kernels[] = {\n")
	for _, k := range kernels {
		fmt.Fprintf(&b, "    {%q, emu_invoker(%s)},\n", k, k)
	}
	fmt.Fprintf(&b, "};\nextern const int emu_nkernels = %d;\n", len(kernels))
	return b.String(), nil
}
