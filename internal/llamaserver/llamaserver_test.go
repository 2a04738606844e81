package llamaserver

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// The stand-in tokenizer.json encodes text as llama.cpp's SentencePiece
// tokenizer does over the stand-in vocabulary (a space before the text,
// spaces as "▁" at id 35, every other byte b at 3+b), and decodes every id
// to the piece llama-server gives it.
func TestStandInTokenizer(t *testing.T) {
	dir := t.TempDir()
	if err := WriteHFTokenizer(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.EOS() != EOS {
		t.Errorf("EOS %d, want %d", tok.EOS(), EOS)
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

// The llama2.c vocabulary file holds the 512 pieces in order.
func TestLlama2CVocab(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tok.bin")
	if err := WriteLlama2CVocab(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(b[4:])
	for id := range VocabSize {
		var score float32
		var n uint32
		binary.Read(r, binary.LittleEndian, &score)
		binary.Read(r, binary.LittleEndian, &n)
		s := make([]byte, n)
		r.Read(s)
		if want := piece(id); string(s) != want {
			t.Fatalf("piece %d is %q, want %q", id, s, want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("%d bytes after the last piece", r.Len())
	}
	if piece(0) != "<unk>" || piece(2) != "</s>" || piece(3) != "<0x00>" || piece(3+255) != "<0xFF>" || piece(35) != " " {
		t.Errorf("pieces 0, 2, 3, 258, 35: %q %q %q %q %q", piece(0), piece(2), piece(3), piece(258), piece(35))
	}
}
