package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// fileJSON is the part of a Hugging Face tokenizer.json this package reads.
// The normaliser, pre-tokenizer, post-processor and decoder are kept as raw
// JSON too, so that Marshal can write them back unchanged.
type fileJSON struct {
	Version       string           `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// configJSON is the part of tokenizer_config.json this package reads: the
// names of the BOS, EOS and PAD tokens. Each is a string, an AddedToken
// object with a "content" field, or null.
type configJSON struct {
	BOS json.RawMessage `json:"bos_token"`
	EOS json.RawMessage `json:"eos_token"`
	PAD json.RawMessage `json:"pad_token"`
	// ChatTemplate is kept as written (a string or a list of named
	// templates) and written back by MarshalConfig; it is not interpreted.
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// Load reads a tokenizer from path, which is either a tokenizer.json file or
// a directory holding one. A tokenizer_config.json beside it, when present,
// names the BOS, EOS and PAD tokens. The name "builtin" selects Builtin().
func Load(path string) (*HF, error) {
	if path == "builtin" {
		return Builtin(), nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w (give a tokenizer.json file, a directory holding one, or \"builtin\")", path, err)
	}
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: read %s: %w", cfgPath, err)
		}
		cfg = nil
	}
	t, err := Parse(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the bytes of a tokenizer.json and,
// optionally (nil), of its tokenizer_config.json.
func Parse(tokenizerJSON, configJSONBytes []byte) (*HF, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	t, err := build(&f)
	if err != nil {
		return nil, err
	}
	if err := t.readConfig(configJSONBytes); err != nil {
		return nil, err
	}
	return t, nil
}

// parseMerges reads the merges in either of the two layouts tokenizer.json
// uses: ["a b", ...] (older) or [["a", "b"], ...] (newer).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, nil
	}
	inner := bytes.TrimSpace(bytes.TrimPrefix(trimmed, []byte("[")))
	if len(inner) > 0 && inner[0] == '"' {
		var flat []string
		if err := json.Unmarshal(trimmed, &flat); err != nil {
			return nil, fmt.Errorf("parse model.merges: %w", err)
		}
		out := make([][2]string, len(flat))
		for i, m := range flat {
			a, b, ok := strings.Cut(m, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("model.merges[%d] = %q: want two tokens separated by one space", i, m)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(trimmed, &pairs); err != nil {
		return nil, fmt.Errorf("parse model.merges (want [\"a b\", ...] or [[\"a\", \"b\"], ...]): %w", err)
	}
	return pairs, nil
}

// tokenName reads a token name from tokenizer_config.json: a string, an
// object with "content", or null/absent ("").
func tokenName(raw json.RawMessage, key string) (string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(trimmed, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return "", fmt.Errorf("tokenizer_config.json %s: want a string or an object with \"content\": %w", key, err)
	}
	return obj.Content, nil
}

// readConfig sets BOS, EOS and PAD from tokenizer_config.json when given,
// and otherwise from well-known token names present in the vocabulary.
func (t *HF) readConfig(data []byte) error {
	t.bos, t.eos, t.pad = -1, -1, -1
	if len(data) > 0 {
		var c configJSON
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("parse tokenizer_config.json: %w", err)
		}
		for _, f := range []struct {
			raw json.RawMessage
			key string
			dst *int
		}{{c.BOS, "bos_token", &t.bos}, {c.EOS, "eos_token", &t.eos}, {c.PAD, "pad_token", &t.pad}} {
			name, err := tokenName(f.raw, f.key)
			if err != nil {
				return err
			}
			if name == "" {
				continue
			}
			id, ok := t.ID(name)
			if !ok {
				return fmt.Errorf("tokenizer_config.json %s %q is not in the vocabulary", f.key, name)
			}
			*f.dst = id
		}
		if !isNull(c.ChatTemplate) {
			t.chatTemplate = c.ChatTemplate
		}
	}
	if t.eos < 0 {
		t.eos = t.firstKnown("<|endoftext|>", "<|end_of_text|>", "<|eos|>", "</s>")
	}
	if t.bos < 0 && len(data) == 0 {
		t.bos = t.firstKnown("<|begin_of_text|>", "<|bos|>", "<s>")
	}
	if t.pad < 0 && len(data) == 0 {
		t.pad = t.firstKnown("<|pad|>", "<pad>")
	}
	t.chat = detectChat(t)
	return nil
}

func (t *HF) nameOf(id int) string {
	if id < 0 {
		return ""
	}
	s, _ := t.TokenString(id)
	return s
}

func (t *HF) firstKnown(names ...string) int {
	for _, n := range names {
		if id, ok := t.added[n]; ok {
			return id
		}
	}
	return -1
}
