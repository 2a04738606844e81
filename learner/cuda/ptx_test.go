package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// These tests need no GPU: they check the embedded PTX against the kernel
// table and the CUDA sources.

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

func TestPTXEmbeddedForEveryKernel(t *testing.T) {
	if len(kernelModules) == 0 {
		t.Fatal("no kernel modules")
	}
	for module, names := range kernelModules {
		src, err := modulePTX(module)
		if err != nil {
			t.Fatalf("module %s: %v", module, err)
		}
		ptx := string(src)
		if strings.TrimSpace(ptx) == "" {
			t.Fatalf("module %s: empty PTX", module)
		}
		for _, want := range []string{"\n.target sm_90\n", "\n.address_size 64\n", "\n.version "} {
			if !strings.Contains(ptx, want) {
				t.Errorf("module %s: PTX lacks %q", module, strings.TrimSpace(want))
			}
		}
		entries := map[string]bool{}
		for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
			entries[m[1]] = true
		}
		for _, name := range names {
			if !entries[name] {
				t.Errorf("kernel %s is launched from Go but is not a .entry of ptx/%s.ptx (entries: %v)", name, module, keys(entries))
			}
			delete(entries, name)
		}
		// An entry the table lacks is dead code or a forgotten wrapper.
		if len(entries) > 0 {
			t.Errorf("ptx/%s.ptx has entries no Go code launches: %v", module, keys(entries))
		}
	}
}

// TestPTXMatchesSources checks that every kernels/*.cu has its PTX module
// and table entry and declares its kernels extern "C" (unmangled names).
// Whether the PTX is up to date is scripts/ptx.sh --check's job, since it
// needs NVRTC.
func TestPTXMatchesSources(t *testing.T) {
	srcs, err := filepath.Glob("kernels/*.cu")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no kernel sources: %v", err)
	}
	ptxs, _ := filepath.Glob("ptx/*.ptx")
	if len(ptxs) != len(srcs) {
		t.Errorf("%d .cu sources but %d .ptx files: run scripts/ptx.sh", len(srcs), len(ptxs))
	}
	declRE := regexp.MustCompile(`extern "C" __global__ void ([A-Za-z_][A-Za-z0-9_]*)\(`)
	for _, s := range srcs {
		module := strings.TrimSuffix(filepath.Base(s), ".cu")
		names, ok := kernelModules[module]
		if !ok {
			t.Errorf("%s has no entry in kernelModules", s)
			continue
		}
		if _, err := os.Stat(filepath.Join("ptx", module+".ptx")); err != nil {
			t.Errorf("%s: %v (run scripts/ptx.sh)", s, err)
		}
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		var declared []string
		for _, m := range declRE.FindAllStringSubmatch(string(b), -1) {
			declared = append(declared, m[1])
		}
		sort.Strings(declared)
		want := append([]string(nil), names...)
		sort.Strings(want)
		if strings.Join(declared, ",") != strings.Join(want, ",") {
			t.Errorf("%s declares kernels %v, the table lists %v", s, declared, want)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
