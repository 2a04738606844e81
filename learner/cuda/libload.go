package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"
)

// LibPathEnv names an environment variable holding extra directories
// (separated by ':') searched first for libcuda, libcublas and libcublasLt.
const LibPathEnv = "AIPO_CUDA_LIB_PATH"

// openLib tries each candidate in order (a bare soname goes through the
// dynamic loader's own search: LD_LIBRARY_PATH, the ld.so cache, the
// default directories) and returns the first that loads. The error lists
// every candidate with the loader's reason, so that a missing GPU stack is
// reported in full.
func openLib(what string, candidates []string) (handle uintptr, path string, err error) {
	var tried []string
	seen := map[string]bool{}
	for _, c := range candidates {
		if seen[c] {
			continue
		}
		seen[c] = true
		if strings.Contains(c, "/") {
			if _, statErr := os.Stat(c); statErr != nil {
				tried = append(tried, c+" (absent)")
				continue
			}
		}
		h, e := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if e == nil {
			return h, c, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", c, e))
	}
	return 0, "", fmt.Errorf("%s not found; tried %s", what, strings.Join(tried, "; "))
}

// extraDirs returns the directories of LibPathEnv.
func extraDirs() []string {
	var out []string
	for _, d := range filepath.SplitList(os.Getenv(LibPathEnv)) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// inDirs returns name joined to each directory.
func inDirs(dirs []string, name string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, filepath.Join(d, name))
	}
	return out
}

// driverCandidates lists where libcuda.so.1 is looked for: LibPathEnv, the
// dynamic loader, then the directories distributions and containers use.
func driverCandidates() []string {
	c := inDirs(extraDirs(), "libcuda.so.1")
	c = append(c, "libcuda.so.1")
	c = append(c, inDirs([]string{
		"/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib64",
		"/usr/lib",
		"/usr/local/nvidia/lib64",
		"/usr/lib/wsl/lib",
	}, "libcuda.so.1")...)
	return c
}

// cublasDirs lists the directories searched for cuBLAS after the dynamic
// loader: LibPathEnv, $CUDA_HOME and /usr/local/cuda, then the nvidia
// folders of Python wheels (PyTorch installs cuBLAS as a wheel, in
// nvidia/cublas/lib for CUDA 12 and nvidia/cu13/lib for CUDA 13) under the
// active virtual or conda environment, the user's and the system's
// site-packages.
func cublasDirs() []string {
	dirs := extraDirs()
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, v)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".local"))
	}
	roots = append(roots, "/usr/local", "/usr", "/opt/conda", "/opt/venv", "/venv")
	for _, r := range roots {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			for _, sub := range []string{"nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib"} {
				m, _ := filepath.Glob(filepath.Join(r, "lib", "python3*", pkgs, sub))
				sort.Slice(m, func(i, j int) bool { return pyMinor(m[i]) > pyMinor(m[j]) }) // newest Python first
				dirs = append(dirs, m...)
			}
		}
	}
	return dirs
}

// pyMinor returns N of the ".../python3.N/..." element of a path, or -1.
func pyMinor(p string) int {
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if rest, ok := strings.CutPrefix(part, "python3."); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				return n
			}
		}
	}
	return -1
}
