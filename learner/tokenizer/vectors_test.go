//go:build shareddata

package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// ggmlVectors reads llama.cpp's tokenizer test vectors: the .inp file holds
// the inputs, each followed by "\n__ggml_vocab_test__\n"; the .out file holds
// one line of ids per input. llama.cpp writes them without BOS (its test
// tokenizes with add_special=false), so they compare with Encode directly.
func ggmlVectors(t *testing.T, name string) (inputs []string, ids [][]int) {
	t.Helper()
	base := filepath.Join(sharedData(t), "tokenizers", "ggml-vocab", name)
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Skipf("test vectors absent: %v", err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatalf("read %s.out: %v", base, err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	parts := strings.Split(string(inp), sep)
	if parts[len(parts)-1] != "" {
		t.Fatalf("%s.inp does not end with the separator", base)
	}
	inputs = parts[:len(parts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d output lines", base, len(inputs), len(lines))
	}
	for i, l := range lines {
		var row []int
		for _, f := range strings.Fields(l) {
			v, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", base, i+1, err)
			}
			row = append(row, v)
		}
		ids = append(ids, row)
	}
	return inputs, ids
}

func TestGGMLVectors(t *testing.T) {
	for _, c := range []struct {
		vectors, tokenizer string
		nfc                bool
	}{
		{"ggml-vocab-qwen2.gguf", "qwen3", true},
		{"ggml-vocab-llama-bpe.gguf", "llama3", false},
	} {
		t.Run(c.tokenizer, func(t *testing.T) {
			inputs, want := ggmlVectors(t, c.vectors)
			tok := sharedTokenizer(t, c.tokenizer)
			if len(inputs) != 46 {
				t.Errorf("%s: %d test strings, want 46", c.vectors, len(inputs))
			}
			for i, s := range inputs {
				got := tok.Encode(s)
				if !slices.Equal(got, want[i]) {
					t.Errorf("%s input %d %q:\n got %v\nwant %v", c.vectors, i, s, got, want[i])
				}
				if sp := tok.EncodeSpecial(s); !slices.Equal(sp, got) {
					t.Errorf("input %d %q: EncodeSpecial %v differs from Encode %v on text without added tokens", i, s, sp, got)
				}
				back, err := tok.Decode(got, false)
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				wantBack := s
				if c.nfc {
					wantBack = norm.NFC.String(s)
				}
				if back != wantBack {
					t.Errorf("input %d: Decode(Encode(%q)) = %q", i, wantBack, back)
				}
			}
		})
	}
}

func TestBOSIsNotAdded(t *testing.T) {
	tok := sharedTokenizer(t, "llama3")
	if got, want := tok.BOS(), 128000; got != want {
		t.Fatalf("llama3 BOS = %d, want %d (<|begin_of_text|> from tokenizer_config.json)", got, want)
	}
	if ids := tok.Encode("Hello"); len(ids) == 0 || ids[0] == tok.BOS() {
		t.Fatalf("Encode(\"Hello\") = %v: BOS must not be added (the post-processor is not applied)", ids)
	}
}

func TestSpecialIDs(t *testing.T) {
	for _, c := range []struct {
		name          string
		bos, eos, pad int
		size          int
	}{
		{"qwen3", -1, 151645, 151643, 151669},
		{"llama3", 128000, 128001, -1, 128256},
	} {
		tok := sharedTokenizer(t, c.name)
		got := fmt.Sprint(tok.BOS(), tok.EOS(), tok.PAD(), tok.VocabSize())
		want := fmt.Sprint(c.bos, c.eos, c.pad, c.size)
		if got != want {
			t.Errorf("%s: BOS EOS PAD VocabSize = %s, want %s", c.name, got, want)
		}
	}
}
