// Package libload finds and opens the GPU libraries the learner loads at
// run time (the CUDA driver, cuBLAS, NCCL) with purego: the candidates a
// library is looked for in, and a dlopen that reports every one it tried.
package libload

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ebitengine/purego"
)

// PathEnv names an environment variable holding extra directories
// (separated by ':') searched first for every library.
const PathEnv = "AIPO_CUDA_LIB_PATH"

// Open tries each candidate in order (a bare soname goes through the
// dynamic loader's own search: LD_LIBRARY_PATH, the ld.so cache, the
// default directories) and returns the first that loads. The error lists
// every candidate with the loader's reason, so that a missing GPU stack is
// reported in full.
func Open(what string, candidates []string) (handle uintptr, path string, err error) {
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

// ExtraDirs returns the directories of PathEnv.
func ExtraDirs() []string {
	var out []string
	for _, d := range filepath.SplitList(os.Getenv(PathEnv)) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// InDirs returns name joined to each directory.
func InDirs(dirs []string, name string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, filepath.Join(d, name))
	}
	return out
}

// DriverCandidates lists where libcuda.so.1 is looked for: PathEnv, the
// dynamic loader, then the directories distributions and containers use.
func DriverCandidates() []string {
	c := InDirs(ExtraDirs(), "libcuda.so.1")
	c = append(c, "libcuda.so.1")
	return append(c, InDirs([]string{
		"/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib64",
		"/usr/lib",
		"/usr/local/nvidia/lib64",
		"/usr/lib/wsl/lib",
	}, "libcuda.so.1")...)
}

// WheelDirs lists the folders sub (such as nvidia/nccl/lib) of Python
// wheels' packages under the active virtual or conda environment, the
// user's and the system's site-packages, the newest Python first in each
// (PyTorch installs cuBLAS and NCCL as wheels).
func WheelDirs(subs ...string) []string {
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
	var dirs []string
	for _, r := range roots {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			for _, sub := range subs {
				m, _ := filepath.Glob(filepath.Join(r, "lib", "python3*", pkgs, sub))
				sort.Slice(m, func(i, j int) bool { return pyMinor(m[i]) > pyMinor(m[j]) })
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
