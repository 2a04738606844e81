//go:build shareddata

package inproc

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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
	// peak is the scripted token's logit (40 when 0), the others' 0: two
	// backends with other peaks give the same tokens other log-probs.
	peak float32
	// at, when set, sees the response position of each token the backend
	// scripts (the logits it returns pick it), before it is sampled.
	at func(pos int)
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
	peak := b.peak
	if peak == 0 {
		peak = 40
	}
	for i, c := range caches {
		sc := c.(*scriptCache)
		sc.toks = append(sc.toks, tokens[i]...)
		dst[i*V+int(b.next(sc.toks))] = peak
		if b.at != nil {
			b.at(len(sc.toks) - b.prompt)
		}
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

// TestPartialRolloutRealVocab interrupts a generation on the Qwen3
// vocabulary at a chosen token and continues it on new weights, as
// rollout.partial does at a weight push (engine.Config.InterruptOnReload):
// the scripted backend of version 1 reloads the engine onto version 2 (the
// same script, another logit peak, so other log-probs) while it scripts
// the token at position cut, which is therefore the last the old weights
// sample. The continuation goes on from the prompt plus the kept ids,
// never from their text: Qwen3's byte-level BPE merges ">" and "\n" into
// one token ">\n", so in "plain", interrupted just after the policy wrote
// them as two, the kept tokens decoded and encoded again are other ids
// (checked here: the trap is live), on which the script, and any model,
// would go on differently; in "tag" the stop string </reason> is completed by the first
// token of the continuation, ">\n" itself, across the interruption. Every
// token keeps the id the script gave, the version and log-prob of the
// weights that sampled it.
func TestPartialRolloutRealVocab(t *testing.T) {
	tok, err := tokenizer.Load(shareddata.Path(t, "tokenizers/qwen3/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	one := func(s string) int32 {
		ids := tok.Encode(s)
		if len(ids) != 1 {
			t.Fatalf("%q encodes to %v, want one Qwen3 token", s, ids)
		}
		return int32(ids[0])
	}
	gt, nl, gtnl := one(">"), one("\n"), one(">\n")
	if got := tok.Encode(">" + "\n"); len(got) != 1 || int32(got[0]) != gtnl {
		t.Fatalf("\">\" then \"\\n\" encode to %v, want the merged token %d", got, gtnl)
	}
	const (
		oldPeak, newPeak = 40, 12
		oldVersion       = 1
		newVersion       = 2
	)
	for _, tc := range []struct {
		name string
		// first is the policy's first turn, as ids; cut the position of
		// the last token the old weights sample.
		first []int32
		cut   int
		// call: the first turn ends in the call tag </reason>.
		call bool
	}{
		{name: "plain", first: append(append(i32(tok.Encode("x = 4")), gt, nl), i32(tok.Encode("Done."))...), cut: len(tok.Encode("x = 4")) + 1},
		{name: "tag", first: append(i32(tok.EncodeSpecial("First <reason>1+2</reason")), gtnl), cut: len(tok.EncodeSpecial("First <reason>1+2</reason")) - 1, call: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			prompt := i32(tok.Encode("What is 1+2?"))
			pieces := [][]int32{tc.first, i32(tok.EncodeSpecial("Then 3."))}
			closing := i32(tok.EncodeSpecial(interact.ResultClose))
			cfg := model.Config{VocabSize: tok.VocabSize(), MaxPositionEmbeddings: 1024}
			oldB := &scriptBackend{cfg: cfg, prompt: len(prompt), pieces: pieces, closing: closing, eos: int32(tok.EOS()), peak: oldPeak}
			newB := &scriptBackend{cfg: cfg, prompt: len(prompt), pieces: pieces, closing: closing, eos: int32(tok.EOS()), peak: newPeak}
			e, err := engine.NewOn(oldB, tok, oldVersion, engine.Config{Name: "partial-vocab", InterruptOnReload: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var once sync.Once
			oldB.at = func(pos int) {
				if pos == tc.cut {
					once.Do(func() {
						if err := e.ReloadOn(newB, newVersion); err != nil {
							t.Error(err)
						}
					})
				}
			}
			srv := "partial-vocab-" + tc.name
			if err := Serve(srv, e); err != nil {
				t.Fatal(err)
			}
			defer Withdraw(srv)
			c, err := policy.Open(ctx, "inproc://"+srv)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			icfg := interact.Default()
			icfg.Temperature = 0
			agents := collab.Set{collab.Reason: collab.Func(func(context.Context, collab.Query) (collab.Answer, error) {
				return collab.Answer{Text: "3", Status: schemas.StatusOK}, nil
			})}
			p, err := interact.New(ctx, c, agents, icfg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Run(ctx, interact.Task{Run: "r", PromptID: "p", Prompt: prompt})
			if err != nil || out.Err != nil {
				t.Fatalf("run: %v %v", err, out.Err)
			}
			tr := out.Trajectory
			if out.Interrupted != 1 {
				t.Fatalf("%d policy calls interrupted, want 1 (the reload at token %d)", out.Interrupted, tc.cut)
			}
			var pol []int32 // the policy's tokens, in order
			for i, src := range tr.TokenSource {
				if src == schemas.SourcePolicy {
					pol = append(pol, tr.ResponseIDs[i])
				}
			}
			want := slices.Clone(tc.first)
			if tc.call {
				want = append(want, pieces[1]...) // after the answer
			}
			want = append(want, int32(tok.EOS()))
			if !slices.Equal(pol, want) {
				t.Fatalf("policy tokens %v, want the script's ids %v", pol, want)
			}
			if !tc.call {
				kept := tc.first[:tc.cut+1]
				text, err := tok.Decode(ints(kept), false)
				if err != nil {
					t.Fatal(err)
				}
				if redone := i32(tok.Encode(text)); slices.Equal(redone, kept) {
					t.Fatalf("the kept tokens %q encode again to the same ids %v: the case does not test the merge", text, redone)
				}
			}
			if tc.call {
				if len(tr.InteractionAgent) != 1 || tr.InteractionQuery[0] != "1+2" {
					t.Fatalf("interactions %v %q, want one reason call with 1+2, completed by the continuation's first token", tr.InteractionAgent, tr.InteractionQuery)
				}
			}
			lp := func(peak float64) float64 { return peak - math.Log(math.Exp(peak)+float64(tok.VocabSize()-1)) }
			n := 0
			for i, src := range tr.TokenSource {
				if src != schemas.SourcePolicy {
					continue
				}
				v, wantLP := int64(newVersion), lp(newPeak)
				if n <= tc.cut {
					v, wantLP = oldVersion, lp(oldPeak)
				}
				n++
				if got := tr.TokenVersion(i); got != v {
					t.Fatalf("policy token %d (response position %d) has version %d, want %d (the last old one is at %d)", n-1, i, got, v, tc.cut)
				}
				if d := math.Abs(float64(tr.BehaviorLogProbs[i]) - wantLP); d > 1e-4 {
					t.Fatalf("policy token %d (version %d) has log-prob %g, its weights give %g", n-1, v, tr.BehaviorLogProbs[i], wantLP)
				}
			}
		})
	}
}
