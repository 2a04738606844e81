//go:build shareddata

package inproc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/policy"
)

type scriptCache struct{ toks []int32 }

func (c *scriptCache) Len() int        { return len(c.toks) }
func (c *scriptCache) Tokens() []int32 { return c.toks }
func (c *scriptCache) Truncate(n int)  { c.toks = c.toks[:n] }
func (c *scriptCache) Bytes() int      { return 4 * len(c.toks) }

// scriptBackend is an engine.Backend over a real vocabulary that writes
// pieces[k] after the prompt and k answer blocks (each ending in the
// tokens of </result>), EOS once the piece or the pieces run out; a
// peaked logit row makes greedy sampling pick it.
type scriptBackend struct {
	cfg     model.Config
	prompt  int
	pieces  [][]int32
	closing []int32
	eos     int32
}

func (b *scriptBackend) Config() model.Config   { return b.cfg }
func (b *scriptBackend) BytesPerToken() int     { return 4 }
func (b *scriptBackend) NewCache() engine.Cache { return &scriptCache{} }
func (b *scriptBackend) Close() error           { return nil }

func (b *scriptBackend) next(seq []int32) int32 {
	k, from := 0, b.prompt
	for i := b.prompt; i+len(b.closing) <= len(seq); i++ {
		if slices.Equal(seq[i:i+len(b.closing)], b.closing) {
			k, from = k+1, i+len(b.closing)
		}
	}
	if pos := len(seq) - from; k < len(b.pieces) && pos < len(b.pieces[k]) {
		return b.pieces[k][pos]
	}
	return b.eos
}

func (b *scriptBackend) Extend(caches []engine.Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	V := b.cfg.VocabSize
	dst = slices.Grow(dst[:0], len(caches)*V)[:len(caches)*V]
	clear(dst)
	for i, c := range caches {
		sc := c.(*scriptCache)
		sc.toks = append(sc.toks, tokens[i]...)
		dst[i*V+int(b.next(sc.toks))] = 40
	}
	return dst, nil
}

func i32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// TestProtocolRealVocab runs the interaction protocol over the in-process
// engine (stop strings checked by the engine on decoded text) on the Qwen3
// and Llama 3 vocabularies: a closing tag completed inside a token is a
// call, the token stays whole and the policy's, and the answer follows it.
func TestProtocolRealVocab(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tok, err := tokenizer.Load(shareddata.Path(t, "tokenizers/"+name+"/tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, opener := range []string{interact.OpenerSystem, interact.OpenerPolicy} {
			for ci, cont := range []string{"\n", ".", ",", ")", "\n\n"} {
				stop := "</reason>"
				if opener == interact.OpenerPolicy {
					stop += interact.ResultOpen
				}
				first := "First <reason>1+2" + stop + cont + "Then"
				t.Run(fmt.Sprintf("%s/%s/%q", name, opener, first), func(t *testing.T) {
					ctx := ctxT(t)
					prompt := i32(tok.Encode("What is 1+2?"))
					b := &scriptBackend{cfg: model.Config{VocabSize: tok.VocabSize(), MaxPositionEmbeddings: 1024}, prompt: len(prompt),
						pieces:  [][]int32{i32(tok.EncodeSpecial(first)), i32(tok.EncodeSpecial("Then 3."))},
						closing: i32(tok.EncodeSpecial(interact.ResultClose)), eos: int32(tok.EOS())}
					e, err := engine.NewOn(b, tok, 1, engine.Config{Name: name})
					if err != nil {
						t.Fatal(err)
					}
					defer e.Close()
					srv := fmt.Sprintf("vocab-%s-%s-%d", name, opener, ci)
					if err := Serve(srv, e); err != nil {
						t.Fatal(err)
					}
					defer Withdraw(srv)
					c, err := policy.Open(ctx, "inproc://"+srv)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					cfg := interact.Default()
					cfg.OpenerBy, cfg.Temperature = opener, 0
					agents := collab.Set{collab.Reason: collab.Func(func(context.Context, collab.Query) (collab.Answer, error) {
						return collab.Answer{Text: "3", Status: schemas.StatusOK}, nil
					})}
					p, err := interact.New(ctx, c, agents, cfg)
					if err != nil {
						t.Fatal(err)
					}
					out, err := p.Run(ctx, interact.Task{Run: "r", PromptID: "p", Prompt: prompt})
					if err != nil || out.Err != nil {
						t.Fatalf("run: %v %v", err, out.Err)
					}
					tr := out.Trajectory
					if len(tr.InteractionAgent) != 1 || tr.InteractionQuery[0] != "1+2" {
						t.Fatalf("interactions %v %q, want one reason call with 1+2; response %q", tr.InteractionAgent, tr.InteractionQuery, tr.ResponseText)
					}
					s, end := int(tr.InteractionSpanStart[0]), int(tr.InteractionSpanEnd[0])
					if !slices.Equal(tr.ResponseIDs[:s], b.pieces[0][:s]) {
						t.Fatalf("policy tokens %v are not the script's %v", tr.ResponseIDs[:s], b.pieces[0])
					}
					pol, _ := tok.Decode(ints(tr.ResponseIDs[:s]), false)
					last, _ := tok.Decode(ints(tr.ResponseIDs[s-1:s]), false)
					if !strings.HasPrefix(first, pol) || !strings.Contains(pol, stop) || strings.Contains(strings.TrimSuffix(pol, last), stop) {
						t.Fatalf("the policy's turn %q does not end with the token completing %q", pol, stop)
					}
					block := "3" + interact.ResultClose
					if opener == interact.OpenerSystem {
						block = interact.ResultOpen + block
					}
					if got, _ := tok.Decode(ints(tr.ResponseIDs[s:end]), false); got != block {
						t.Fatalf("span decodes to %q, want %q", got, block)
					}
					want := pol + block + "Then 3."
					if got, _ := tok.Decode(ints(tr.ResponseIDs), false); got != want+mustEOS(tok) {
						t.Fatalf("response decodes to %q, want %q", got, want+mustEOS(tok))
					}
					for i, src := range tr.TokenSource {
						if (src == schemas.SourcePolicy) != (i < s || i >= end) {
							t.Fatalf("token %d has source %d outside/inside span [%d,%d)", i, src, s, end)
						}
					}
				})
			}
		}
	}
}

func ints(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func mustEOS(tok *tokenizer.HF) string {
	s, _ := tok.TokenString(tok.EOS())
	return s
}
