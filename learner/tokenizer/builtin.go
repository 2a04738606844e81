package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// Names of the built-in vocabulary's added tokens.
const (
	BuiltinPAD      = "<|pad|>"
	BuiltinBOS      = "<|bos|>"
	BuiltinEOS      = "<|eos|>"
	BuiltinImStart  = "<|im_start|>"
	BuiltinImEnd    = "<|im_end|>"
	builtinByteSize = 256
)

// BuiltinAgentTags are the collaborator tags of the rollout protocol; the
// built-in vocabulary holds each as one (non-special) added token.
var BuiltinAgentTags = []string{
	"<verify>", "</verify>", "<retrieval>", "</retrieval>",
	"<reason>", "</reason>", "<result>", "</result>",
}

var (
	builtinOnce sync.Once
	builtinTok  *HF
)

// Builtin returns the built-in vocabulary for small demonstration models:
// ids 0..255 are the 256 byte values (any text can be encoded, one token
// per byte), then the special tokens <|pad|> (256), <|bos|> (257), <|eos|>
// (258), <|im_start|> (259) and <|im_end|> (260), then the agent tags
// <verify> ... </result> (261..268) as non-special added tokens. There are
// no merges. Its chat format is ChatML. The returned tokenizer is shared.
func Builtin() *HF {
	builtinOnce.Do(func() {
		t, err := Parse(builtinJSON(), builtinConfigJSON())
		if err != nil {
			panic(fmt.Sprintf("tokenizer: the built-in vocabulary does not load: %v", err))
		}
		builtinTok = t
	})
	return builtinTok
}

// BuiltinVocabSize is the number of tokens of Builtin().
const BuiltinVocabSize = builtinByteSize + 5 + 8

func builtinJSON() []byte {
	vocab := make(map[string]int, builtinByteSize)
	for b := 0; b < builtinByteSize; b++ {
		vocab[string(byteToRune[b])] = b
	}
	var added []addedTokenJSON
	id := builtinByteSize
	for _, s := range []string{BuiltinPAD, BuiltinBOS, BuiltinEOS, BuiltinImStart, BuiltinImEnd} {
		added = append(added, addedTokenJSON{ID: id, Content: s, Special: true})
		id++
	}
	for _, s := range BuiltinAgentTags {
		added = append(added, addedTokenJSON{ID: id, Content: s})
		id++
	}
	f := &fileJSON{
		Version:      "1.0",
		AddedTokens:  added,
		PreTokenizer: json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Decoder:      json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Model:        modelJSON{Type: "BPE", Vocab: vocab, Merges: json.RawMessage(`[]`)},
	}
	out, err := marshalFile(f, nil)
	if err != nil {
		panic(fmt.Sprintf("tokenizer: write the built-in vocabulary: %v", err))
	}
	return out
}

// builtinChatTemplate is ChatML as a Jinja template, for tools that render
// chat templates from tokenizer_config.json.
const builtinChatTemplate = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

func builtinConfigJSON() []byte {
	var tmpl bytes.Buffer
	if err := jsonString(&tmpl, builtinChatTemplate); err != nil {
		panic(err)
	}
	out, err := marshalConfig(BuiltinBOS, BuiltinEOS, BuiltinPAD, tmpl.Bytes())
	if err != nil {
		panic(fmt.Sprintf("tokenizer: write the built-in configuration: %v", err))
	}
	return out
}
