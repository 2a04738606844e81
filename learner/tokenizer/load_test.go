package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// byteVocabJSON is a vocabulary of the 256 byte-level characters.
func byteVocabJSON() string {
	v := map[string]int{}
	for b := 0; b < 256; b++ {
		v[string(byteToRune[b])] = b
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestParseErrors(t *testing.T) {
	vocab := byteVocabJSON()
	for _, c := range []struct {
		name, json, want string
	}{
		{"not json", `{`, "parse tokenizer.json"},
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{"a":0}}}`, `model.type "WordPiece"`},
		{"no byte level", `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"Isolated"}}`, "no ByteLevel"},
		{"bad regex", `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?<"},"behavior":"Isolated"},{"type":"ByteLevel"}]}}`, "does not compile"},
		{"bad merge", `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"}}`, `model.merges[0] "a" + "b"`},
		{"bad merge text", `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":["ab"]},"pre_tokenizer":{"type":"ByteLevel"}}`, "two tokens"},
		{"missing byte", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`, "byte-level character"},
		{"normalizer", `{"normalizer":{"type":"Lowercase"},"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`, `normalizer type "Lowercase"`},
		{"decoder", `{"decoder":{"type":"WordPiece"},"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`, `decoder type "WordPiece"`},
		{"behavior", `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"-"},"behavior":"Sideways"},{"type":"ByteLevel"}]}}`, `behavior "Sideways"`},
	} {
		_, err := Parse([]byte(c.json), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
	ok := `{"model":{"type":"BPE","vocab":` + vocab + `,"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`
	if _, err := Parse([]byte(ok), []byte(`{"eos_token":"<nope>"}`)); err == nil || !strings.Contains(err.Error(), `eos_token "<nope>"`) {
		t.Errorf("unknown eos_token: err = %v, want one naming it", err)
	}
}

func TestLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.json")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the path", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load(dir with empty tokenizer.json) = %v, want an error naming the file", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
