package tokenizer

import (
	"github.com/aipo-rl/aipo/internal/shareddata"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// sharedData returns the shared/data folder found by walking up from the
// package directory (it lies beside the repository root), or skips the test.
// AIPO_SHARED_DATA overrides the search.
func sharedData(t testing.TB) string {
	t.Helper()
	d := shareddata.Dir()
	if d == "" {
		t.Skip("shared data folder not found (want ../shared/data beside the checkout, or set AIPO_SHARED_DATA)")
	}
	return d
}

// sharedDataOrEmpty is sharedData without skipping: "" when absent.
func sharedDataOrEmpty() string { return shareddata.Dir() }

var (
	loadedMu sync.Mutex
	loaded   = map[string]*HF{}
)

// sharedTokenizer loads tokenizers/<name>/tokenizer.json once per test binary.
func sharedTokenizer(t testing.TB, name string) *HF {
	t.Helper()
	path := filepath.Join(sharedData(t), "tokenizers", name, "tokenizer.json")
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tok, ok := loaded[path]; ok {
		return tok
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is absent (%v): skipping", path, err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	loaded[path] = tok
	return tok
}

// forEachVocab runs f as a subtest for Qwen3, Llama 3 (skipped without the
// shared data) and the built-in vocabulary.
func forEachVocab(t *testing.T, f func(t *testing.T, tok *HF)) {
	for _, name := range []string{"qwen3", "llama3", "builtin"} {
		t.Run(name, func(t *testing.T) {
			if name == "builtin" {
				f(t, Builtin())
				return
			}
			f(t, sharedTokenizer(t, name))
		})
	}
}
