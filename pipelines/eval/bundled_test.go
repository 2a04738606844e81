package eval

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/evalconfig"
)

// Without data_dir the presets read the copy bundled in the binary: no
// folder outside the repository is looked for (an offline data folder
// named by AIPO_SHARED_DATA, here empty, is not used).
func TestPresetsReadTheBundledCopy(t *testing.T) {
	t.Setenv("AIPO_SHARED_DATA", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, name := range evalconfig.PresetNames() {
		r, err := evalconfig.Config{}.WithDefaults().Resolve(evalconfig.Benchmark{Preset: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasSuffix(filepath.ToSlash(r.Source.Path), evalconfig.Presets[name].RelPath) || !strings.Contains(r.Source.Path, "benchmarks-") {
			t.Errorf("%s reads %s, want the bundled %s", name, r.Source.Path, evalconfig.Presets[name].RelPath)
		}
		good, dead, err := load(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(good) != evalconfig.Presets[name].Rows || len(dead) != 0 {
			t.Errorf("%s: %d problems (%d dead-lettered), want %d", name, len(good), len(dead), evalconfig.Presets[name].Rows)
		}
	}
}
