package llamaserver

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

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
