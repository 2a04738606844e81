//go:build shareddata

package chattemplate

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestSharedTemplatesAreTheCopies checks that the copies in testdata hold
// the chat templates of the shared data folder, when it is there.
func TestSharedTemplatesAreTheCopies(t *testing.T) {
	shared := os.Getenv("AIPO_SHARED_DATA")
	if shared == "" {
		shared = filepath.Join("..", "..", "..", "shared", "data")
	}
	for _, name := range []string{"qwen3", "llama3"} {
		dir := filepath.Join(shared, "tokenizers", name)
		if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err != nil {
			t.Skipf("shared data folder not found (%v)", err)
		}
		orig, err := Load(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := Load(context.Background(), filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if orig.Source() != cp.Source() {
			t.Errorf("%s: testdata's chat_template differs from %s", name, orig.File())
		}
	}
}
