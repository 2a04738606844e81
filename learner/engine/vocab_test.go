//go:build shareddata

package engine

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
)

// scriptCache is the cache of scriptBackend: the tokens fed so far.
type scriptCache struct{ toks []int32 }

func (c *scriptCache) Len() int        { return len(c.toks) }
func (c *scriptCache) Tokens() []int32 { return c.toks }
func (c *scriptCache) Truncate(n int)  { c.toks = c.toks[:n] }
func (c *scriptCache) Bytes() int      { return 4 * len(c.toks) }
func (c *scriptCache) clone() []int32  { return slices.Clone(c.toks) }
func (c *scriptCache) feed(t []int32)  { c.toks = append(c.toks, t...) }

func (b scriptBackend) BytesPerToken() int { return 4 }

// scriptBackend is a Backend over a real vocabulary whose next token is
// next(sequence so far), made certain by a peaked logit row: the engine's
// scheduler, sampler and stop checks run as they do for a model.
type scriptBackend struct {
	cfg  model.Config
	next func(seq []int32) int32
}

func (b scriptBackend) Config() model.Config { return b.cfg }
func (b scriptBackend) NewCache() Cache      { return &scriptCache{} }
func (b scriptBackend) Close() error         { return nil }

func (b scriptBackend) Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	V := b.cfg.VocabSize
	if cap(dst) < len(caches)*V {
		dst = make([]float32, len(caches)*V)
	}
	dst = dst[:len(caches)*V]
	clear(dst)
	for i, c := range caches {
		sc := c.(*scriptCache)
		sc.feed(tokens[i])
		dst[i*V+int(b.next(sc.clone()))] = 40
	}
	return dst, nil
}

func loadVocab(t *testing.T, name string) *tokenizer.HF {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join(shareddata.Path(t, "tokenizers/"+name), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func toIDs(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// TestStopStringInsideToken: on Qwen3 and Llama 3, a stop string completed
// inside a token ("</verify>" by ">\n", ">.", ">," ...) ends generation
// after that token, kept whole, with the stop string reported.
func TestStopStringInsideToken(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tok := loadVocab(t, name)
		eos := int32(tok.EOS())
		for _, cont := range []string{"\n", "\n\n", ".", ",", ")", "So", " So", ""} {
			text := "Check <verify>2+2=4</verify>" + cont + " it holds."
			script := toIDs(tok.EncodeSpecial(text))
			prefix := toIDs(tok.Encode("Q: 2+2?"))
			b := scriptBackend{cfg: model.Config{VocabSize: tok.VocabSize(), MaxPositionEmbeddings: 512},
				next: func(seq []int32) int32 {
					if i := len(seq) - len(prefix); i < len(script) {
						return script[i]
					}
					return eos
				}}
			e, err := NewOn(b, tok, 1, Config{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.Generate(testCtx(t), Request{Prefix: prefix, Params: sampling.Params{MaxTokens: 64, StopStrings: []string{"</reason>", "</verify>"}}})
			e.Close()
			if err != nil {
				t.Fatal(err)
			}
			out, _ := tok.Decode(toInts(res.Tokens), false)
			last, _ := tok.Decode(toInts(res.Tokens[len(res.Tokens)-1:]), false)
			before := strings.TrimSuffix(out, last)
			if res.FinishReason != sampling.FinishStop || res.Stop != "</verify>" || !strings.Contains(out, "</verify>") || strings.Contains(before, "</verify>") {
				t.Fatalf("%s %q: finish %q stop %q output %q (last token %q); want stop at the token completing </verify>", name, text, res.FinishReason, res.Stop, out, last)
			}
			if !slices.Equal(res.Tokens, script[:len(res.Tokens)]) {
				t.Fatalf("%s %q: tokens %v are not the script's %v", name, text, res.Tokens, script[:len(res.Tokens)])
			}
			if tail := out[strings.Index(out, "</verify>")+len("</verify>"):]; !strings.HasPrefix(cont+" it holds.", tail) {
				t.Fatalf("%s %q: the stop token's characters after the tag are %q", name, text, tail)
			}
		}
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
