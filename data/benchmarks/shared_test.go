//go:build shareddata

package benchmarks

import (
	"os"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
)

// Each bundled file is byte for byte the copy in ../shared/data it was
// taken from.
func TestBundledFilesAreTheOfflineCopies(t *testing.T) {
	for _, path := range Files() {
		b, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := os.ReadFile(shareddata.Path(t, path))
		if err != nil {
			t.Fatal(err)
		}
		if string(orig) != string(b) {
			t.Errorf("%s differs from %s in the offline data folder", path, path)
		}
	}
}
