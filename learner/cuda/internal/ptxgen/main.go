// Command ptxgen compiles the CUDA C kernels of learner/cuda to PTX with
// NVRTC, loaded at run time with purego (no CUDA toolkit and no cgo). It is
// run by scripts/ptx.sh, never by the normal build:
//
//	ptxgen -src learner/cuda/kernels -out learner/cuda/ptx
//
// Every kernels/*.cu becomes ptx/<name>.ptx; the kernels/*.cuh files are
// handed to NVRTC as headers under their base names. The options are fixed
// (see nvrtcOptions) so that the output depends only on the sources and
// the NVRTC version. NVRTC is looked for as $AIPO_NVRTC, then libnvrtc.so
// and the sonames of CUDA 13, 12 and 11 (Debian's libnvrtc11.2 package).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// nvrtcOptions: PTX for compute capability 9.0 (Hopper; newer GPUs JIT it
// too); no fused multiply-add contraction, so that each float32 operation
// rounds as the CPU code's does; IEEE division and square root (NVRTC's
// defaults, spelled out).
var nvrtcOptions = []string{
	"--gpu-architecture=compute_90",
	"--fmad=false",
	"--prec-div=true",
	"--prec-sqrt=true",
	"--std=c++17",
}

type nvrtc struct {
	version        func(major, minor *int32) int32
	errorString    func(r int32) *byte
	createProgram  func(prog *uintptr, src *byte, name *byte, nHeaders int32, headers, names unsafe.Pointer) int32
	compileProgram func(prog uintptr, nOpts int32, opts unsafe.Pointer) int32
	logSize        func(prog uintptr, n *uint64) int32
	log            func(prog uintptr, buf *byte) int32
	ptxSize        func(prog uintptr, n *uint64) int32
	ptx            func(prog uintptr, buf *byte) int32
	destroy        func(prog *uintptr) int32
}

func load() (*nvrtc, string, error) {
	cands := []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	if p := os.Getenv("AIPO_NVRTC"); p != "" {
		cands = append([]string{p}, cands...)
	}
	var tried []string
	for _, c := range cands {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
			continue
		}
		n := &nvrtc{}
		for _, f := range []struct {
			fn   any
			name string
		}{
			{&n.version, "nvrtcVersion"},
			{&n.errorString, "nvrtcGetErrorString"},
			{&n.createProgram, "nvrtcCreateProgram"},
			{&n.compileProgram, "nvrtcCompileProgram"},
			{&n.logSize, "nvrtcGetProgramLogSize"},
			{&n.log, "nvrtcGetProgramLog"},
			{&n.ptxSize, "nvrtcGetPTXSize"},
			{&n.ptx, "nvrtcGetPTX"},
			{&n.destroy, "nvrtcDestroyProgram"},
		} {
			sym, err := purego.Dlsym(h, f.name)
			if err != nil {
				return nil, "", fmt.Errorf("%s has no %s: %v", c, f.name, err)
			}
			purego.RegisterFunc(f.fn, sym)
		}
		return n, c, nil
	}
	return nil, "", fmt.Errorf("NVRTC not found; tried %s", strings.Join(tried, "; "))
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func gostr(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

func (n *nvrtc) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", call, gostr(n.errorString(r)))
}

// cstrArray returns a C array of pointers to NUL-terminated copies of ss,
// pinned by pin while the pointers are in use.
func cstrArray(pin *runtime.Pinner, ss []string) unsafe.Pointer {
	if len(ss) == 0 {
		return nil
	}
	ptrs := make([]*byte, len(ss))
	for i, s := range ss {
		b := cstr(s)
		pin.Pin(&b[0])
		ptrs[i] = &b[0]
	}
	return unsafe.Pointer(&ptrs[0])
}

// compile returns the PTX of one source file.
func (n *nvrtc) compile(name, src string, headers, headerNames []string) (string, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	srcB, nameB := cstr(src), cstr(name)
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.createProgram(&prog, &srcB[0], &nameB[0], int32(len(headers)),
		cstrArray(&pin, headers), cstrArray(&pin, headerNames))); err != nil {
		return "", err
	}
	defer n.destroy(&prog)
	cerr := n.check("nvrtcCompileProgram", n.compileProgram(prog, int32(len(nvrtcOptions)), cstrArray(&pin, nvrtcOptions)))
	var logN uint64
	if err := n.check("nvrtcGetProgramLogSize", n.logSize(prog, &logN)); err != nil {
		return "", err
	}
	var log string
	if logN > 1 {
		buf := make([]byte, logN)
		if err := n.check("nvrtcGetProgramLog", n.log(prog, &buf[0])); err != nil {
			return "", err
		}
		log = strings.TrimSpace(string(buf[:logN-1]))
	}
	if cerr != nil {
		return "", fmt.Errorf("%s: %v\n%s", name, cerr, log)
	}
	if log != "" {
		// Warnings fail the build: the kernels are small enough to be clean.
		return "", fmt.Errorf("%s: NVRTC warnings:\n%s", name, log)
	}
	var ptxN uint64
	if err := n.check("nvrtcGetPTXSize", n.ptxSize(prog, &ptxN)); err != nil {
		return "", err
	}
	buf := make([]byte, ptxN)
	if err := n.check("nvrtcGetPTX", n.ptx(prog, &buf[0])); err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf), "\x00"), nil
}

func main() {
	src := flag.String("src", "learner/cuda/kernels", "directory of the .cu and .cuh files")
	out := flag.String("out", "learner/cuda/ptx", "directory the .ptx files are written to")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
}

func run(srcDir, outDir string) error {
	n, lib, err := load()
	if err != nil {
		return err
	}
	var major, minor int32
	if err := n.check("nvrtcVersion", n.version(&major, &minor)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ptxgen: NVRTC %d.%d (%s), options %s\n", major, minor, lib, strings.Join(nvrtcOptions, " "))
	hdrFiles, _ := filepath.Glob(filepath.Join(srcDir, "*.cuh"))
	var headers, names []string
	for _, h := range hdrFiles {
		b, err := os.ReadFile(h)
		if err != nil {
			return err
		}
		headers = append(headers, string(b))
		names = append(names, filepath.Base(h))
	}
	srcs, _ := filepath.Glob(filepath.Join(srcDir, "*.cu"))
	if len(srcs) == 0 {
		return fmt.Errorf("no .cu files in %s", srcDir)
	}
	sort.Strings(srcs)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		base := filepath.Base(s)
		ptx, err := n.compile(base, string(b), headers, names)
		if err != nil {
			return err
		}
		dst := filepath.Join(outDir, strings.TrimSuffix(base, ".cu")+".ptx")
		if err := os.WriteFile(dst, []byte(ptx), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "ptxgen: %s -> %s (%d bytes)\n", s, dst, len(ptx))
	}
	return nil
}
