package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hfReference is testdata/hf_reference.json, written by
// scripts/tokenizer-fixtures.sh with Hugging Face's tokenizer (Rust, through
// npm "tokenizers") and chat templates rendered by "@huggingface/jinja".
type hfReference struct {
	Versions map[string]string `json:"versions"`
	Encode   []struct {
		Tokenizer string `json:"tokenizer"`
		Text      string `json:"text"`
		IDs       []int  `json:"ids"`
	} `json:"encode"`
	Chat []struct {
		Tokenizer           string    `json:"tokenizer"`
		Messages            []Message `json:"messages"`
		AddGenerationPrompt bool      `json:"add_generation_prompt"`
		EnableThinking      *bool     `json:"enable_thinking"`
		Text                string    `json:"text"`
		IDs                 []int     `json:"ids"`
	} `json:"chat"`
	Decode []struct {
		Tokenizer   string `json:"tokenizer"`
		IDs         []int  `json:"ids"`
		SkipSpecial bool   `json:"skip_special"`
		Text        string `json:"text"`
	} `json:"decode"`
	Splits []struct {
		Delimiter string   `json:"delimiter"`
		Behavior  string   `json:"behavior"`
		Invert    bool     `json:"invert"`
		Input     string   `json:"input"`
		Pieces    []string `json:"pieces"`
	} `json:"splits"`
}

func readReference(t *testing.T) *hfReference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "hf_reference.json"))
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/tokenizer-fixtures.sh)", err)
	}
	var ref hfReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("testdata/hf_reference.json: %v", err)
	}
	return &ref
}

func referenceTokenizer(t *testing.T, name string) *HF {
	if name == "builtin" {
		tok, err := Load(filepath.Join("testdata", "builtin"))
		if err != nil {
			t.Fatalf("Load(testdata/builtin): %v", err)
		}
		return tok
	}
	return sharedTokenizer(t, name)
}

func containsAdded(tok *HF, s string) bool {
	for _, a := range tok.addedL {
		if strings.Contains(s, a.Content) {
			return true
		}
	}
	return false
}

// TestHFReferenceEncode compares EncodeSpecial with Hugging Face's encoding
// (special parsing on, no post-processor tokens) of hand-picked, GSM8K and
// random texts, and Encode with it where the text holds no added token.
func TestHFReferenceEncode(t *testing.T) {
	ref := readReference(t)
	for _, name := range append(slices.Clone(sharedVocabs), "builtin") {
		t.Run(name, func(t *testing.T) {
			tok := referenceTokenizer(t, name)
			count := 0
			for i, e := range ref.Encode {
				if e.Tokenizer != name {
					continue
				}
				count++
				if got := tok.EncodeSpecial(e.Text); !slices.Equal(got, e.IDs) {
					t.Errorf("encode[%d] EncodeSpecial(%q):\n got %v\nwant %v (Hugging Face tokenizers %s)", i, e.Text, got, e.IDs, ref.Versions["tokenizers"])
				}
				plain := tok.Encode(e.Text)
				if !containsAdded(tok, e.Text) && !slices.Equal(plain, e.IDs) {
					t.Errorf("encode[%d] Encode(%q):\n got %v\nwant %v", i, e.Text, plain, e.IDs)
				}
				for _, id := range plain {
					if tok.IsAdded(id) {
						t.Errorf("encode[%d] Encode(%q) produced added token %d with special parsing off", i, e.Text, id)
					}
				}
			}
			if count == 0 {
				t.Fatalf("no reference encodings for %s", name)
			}
		})
	}
}

// TestHFReferenceChat compares ApplyChatWith with Hugging Face's encoding of
// the chat template rendered from tokenizer_config.json.
func TestHFReferenceChat(t *testing.T) {
	ref := readReference(t)
	for _, name := range append(slices.Clone(sharedVocabs), "builtin") {
		t.Run(name, func(t *testing.T) {
			tok := referenceTokenizer(t, name)
			seen := 0
			for i, c := range ref.Chat {
				if c.Tokenizer != name {
					continue
				}
				seen++
				opt := ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, DisableThinking: c.EnableThinking != nil && !*c.EnableThinking}
				got, err := tok.ApplyChatWith(c.Messages, opt)
				if err != nil {
					t.Errorf("chat[%d]: %v", i, err)
					continue
				}
				if !slices.Equal(got, c.IDs) {
					text, _ := tok.Decode(got, false)
					t.Errorf("chat[%d] %+v:\n got %v\nwant %v\n got text %q\nwant text %q", i, opt, got, c.IDs, text, c.Text)
				}
			}
			if seen == 0 {
				t.Errorf("no reference chats for %s", name)
			}
		})
	}
}

func TestHFReferenceDecode(t *testing.T) {
	ref := readReference(t)
	for _, name := range append(slices.Clone(sharedVocabs), "builtin") {
		t.Run(name, func(t *testing.T) {
			tok := referenceTokenizer(t, name)
			for i, d := range ref.Decode {
				if d.Tokenizer != name {
					continue
				}
				got, err := tok.Decode(d.IDs, d.SkipSpecial)
				if err != nil {
					t.Fatalf("decode[%d]: %v", i, err)
				}
				if got != d.Text {
					t.Errorf("decode[%d] skipSpecial=%v:\n got %q\nwant %q", i, d.SkipSpecial, got, d.Text)
				}
			}
		})
	}
}

// TestHFReferenceSplit compares the Split pre-tokenizer's five behaviours,
// plain and inverted, with Hugging Face's.
func TestHFReferenceSplit(t *testing.T) {
	ref := readReference(t)
	if len(ref.Splits) == 0 {
		t.Fatal("no reference splits")
	}
	for _, c := range ref.Splits {
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			t.Fatal(err)
		}
		st := &splitStep{m: literalSplitter(c.Delimiter), behavior: b, invert: c.Invert}
		got := st.split(nil, []string{c.Input})
		if !slices.Equal(got, c.Pieces) && !(len(got) == 0 && len(c.Pieces) == 0) {
			t.Errorf("Split %q %s invert=%v on %q: got %q, want %q", c.Delimiter, c.Behavior, c.Invert, c.Input, got, c.Pieces)
		}
	}
}
