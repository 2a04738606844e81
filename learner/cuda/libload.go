package cuda

import (
	"os"
	"path/filepath"

	"github.com/aipo-rl/aipo/learner/internal/libload"
)

// LibPathEnv names an environment variable holding extra directories
// (separated by ':') searched first for libcuda, libcublas and libcublasLt.
const LibPathEnv = libload.PathEnv

// openLib dlopens the first candidate that loads (libload.Open).
func openLib(what string, candidates []string) (uintptr, string, error) {
	return libload.Open(what, candidates)
}

// extraDirs returns the directories of LibPathEnv.
func extraDirs() []string { return libload.ExtraDirs() }

// inDirs returns name joined to each directory.
func inDirs(dirs []string, name string) []string { return libload.InDirs(dirs, name) }

// driverCandidates lists where libcuda.so.1 is looked for (libload).
func driverCandidates() []string { return libload.DriverCandidates() }

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
	dirs = append(dirs, libload.WheelDirs("nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib")...)
	return dirs
}
