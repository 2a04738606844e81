//go:build !shareddata

package tokenizer

import "testing"

// Without -tags shareddata, forEachVocab and the Hugging Face reference
// tests run on the built-in vocabulary alone: Qwen3's and Llama 3's are in
// ../shared/data (shared_test.go).
var sharedVocabs []string

// sharedTokenizer is shared_test.go's; without -tags shareddata no
// vocabulary of sharedVocabs calls for it.
func sharedTokenizer(t testing.TB, name string) *HF {
	t.Helper()
	t.Fatalf("the %s tokenizer is in ../shared/data: this test needs -tags shareddata", name)
	return nil
}
