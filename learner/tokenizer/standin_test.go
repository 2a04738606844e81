package tokenizer_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/internal/llamaserver"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// The stand-in tokenizer.json encodes text as llama.cpp's SentencePiece
// tokenizer does over the stand-in vocabulary (a space before the text,
// spaces as "▁" at id 35, every other byte b at 3+b), and decodes every id
// to the piece llama-server gives it.
func TestStandInTokenizer(t *testing.T) {
	dir := t.TempDir()
	if err := llamaserver.WriteHFTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.EOS() != llamaserver.EOS {
		t.Errorf("EOS %d, want %d", tok.EOS(), llamaserver.EOS)
	}
	want := []int{35, 3 + 'T', 3 + 'o', 3 + 'm', 35, 3 + 'r', 3 + 'a', 3 + 'n', 3 + '.', 3 + 0xC3, 3 + 0xA9}
	if got := tok.Encode("Tom ran.é"); !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	for id, text := range map[int]string{35: " ", 3 + 'a': "a", 300: "[filler_300]", 511: "[filler_511]"} {
		if got, err := tok.Decode([]int{id}, false); err != nil || got != text {
			t.Errorf("Decode(%d) = %q, %v; want %q", id, got, err, text)
		}
	}
}
