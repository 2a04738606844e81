package tokenizer

import (
	"slices"
	"testing"
)

// forEachVocab runs f as a subtest for each vocabulary of sharedVocabs
// (Qwen3's and Llama 3's with -tags shareddata) and the built-in one.
func forEachVocab(t *testing.T, f func(t *testing.T, tok *HF)) {
	for _, name := range append(slices.Clone(sharedVocabs), "builtin") {
		t.Run(name, func(t *testing.T) {
			if name == "builtin" {
				f(t, Builtin())
				return
			}
			f(t, sharedTokenizer(t, name))
		})
	}
}
