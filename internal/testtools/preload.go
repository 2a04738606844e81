package testtools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TCMallocPaths are where Debian's libtcmalloc-minimal4 (and other
// distributions' packages) put TCMalloc.
var TCMallocPaths = []string{
	"/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
	"/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
	"/usr/lib64/libtcmalloc_minimal.so.4",
	"/usr/lib/libtcmalloc_minimal.so.4",
}

// CPUPreloads is LD_PRELOAD as vLLM's CPU installation page and
// PyTorch's CPU performance tuning guide set it for a PyTorch process on
// an x86 CPU: TCMalloc, then Intel OpenMP (libiomp5, from PyPI's
// intel-openmp, which the environment of py installs: the pinned
// environment of scripts/vllm.sh does). A missing library is an error
// naming it and how to install it.
func CPUPreloads(py string) (string, error) {
	var tc string
	for _, p := range TCMallocPaths {
		if _, err := os.Stat(p); err == nil {
			tc = p
			break
		}
	}
	if tc == "" {
		return "", fmt.Errorf("TCMalloc, which vLLM's and PyTorch's CPU guides preload, is not installed (looked in %s): apt-get install libtcmalloc-minimal4 (make setup-test does on Debian)", strings.Join(TCMallocPaths, ", "))
	}
	iomp := filepath.Join(filepath.Dir(filepath.Dir(py)), "lib", "libiomp5.so")
	if _, err := os.Stat(iomp); err != nil {
		return "", fmt.Errorf("Intel OpenMP, which vLLM's and PyTorch's CPU guides preload, is not in the environment of %s (%s): pip install intel-openmp into it (scripts/vllm/requirements.txt pins it)", py, iomp)
	}
	return tc + ":" + iomp, nil
}
