//go:build shareddata

package interact

// Tags on real vocabularies: a scripted policy emits the token ids of real
// texts encoded with the Qwen3 and Llama 3 tokenizers (tokenizer.json of
// the shared data folder) and stops the way the in-process engine, aipo
// serve, vLLM and SGLang do: after the token whose bytes complete a stop
// string, that token kept whole. learner/tokenizer has no GGUF loader, so
// the ggml vocabularies of the shared folder are not used here; they hold
// the same vocabularies as these two files (Qwen2/3 and Llama 3 BPE).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/policy"
)

var (
	vocabMu     sync.Mutex
	vocabLoaded = map[string]*tokenizer.HF{}
)

// realVocabs are the vocabularies every test below runs on.
var realVocabs = []string{"qwen3", "llama3"}

// realTokenizer loads tokenizers/<name>/tokenizer.json once per test
// binary, or skips the test when the shared data folder is absent.
func realTokenizer(t testing.TB, name string) *tokenizer.HF {
	t.Helper()
	path := shareddata.Path(t, "tokenizers/"+name+"/tokenizer.json")
	vocabMu.Lock()
	defer vocabMu.Unlock()
	if tok, ok := vocabLoaded[path]; ok {
		return tok
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	vocabLoaded[path] = tok
	return tok
}

func ids32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func ints(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// vocabPolicy is a policy.Client over a real tokenizer. Generate call k
// of a session emits the ids of pieces[k] encoded with special parsing on
// (EOS alone once the pieces run out) and stops after EOS, a stop token
// id, max_tokens, or the token whose bytes complete a stop string: the
// check of learner/engine (an occurrence ending inside the newest token's
// bytes), the token kept whole.
type vocabPolicy struct {
	tok    *tokenizer.HF
	pieces []string

	mu      sync.Mutex
	calls   map[string]int
	emitted [][]int32 // tokens of each Generate call, in order
}

func newVocabPolicy(tok *tokenizer.HF, pieces ...string) *vocabPolicy {
	return &vocabPolicy{tok: tok, pieces: pieces, calls: map[string]int{}}
}

func (v *vocabPolicy) Generate(_ context.Context, req policy.Request) (policy.Result, error) {
	v.mu.Lock()
	k := v.calls[req.Session]
	v.calls[req.Session]++
	v.mu.Unlock()
	ids := []int32{int32(v.tok.EOS())}
	if k < len(v.pieces) {
		ids = ids32(v.tok.EncodeSpecial(v.pieces[k]))
	}
	res := policy.Result{PolicyVersion: 3, FinishReason: sampling.FinishLength}
	var text []byte
	defer func() {
		v.mu.Lock()
		v.emitted = append(v.emitted, append([]int32(nil), res.Tokens...))
		v.mu.Unlock()
	}()
outer:
	for i, id := range ids {
		if len(res.Tokens) == req.Params.MaxTokens {
			break
		}
		res.Tokens = append(res.Tokens, id)
		res.LogProbs = append(res.LogProbs, logProb(req.Params.Seed, i))
		if int(id) == v.tok.EOS() {
			res.FinishReason = sampling.FinishEOS
			break
		}
		for _, st := range req.Params.StopTokenIDs {
			if id == st {
				res.FinishReason, res.Stop = sampling.FinishStop, fmt.Sprint(id)
				break outer
			}
		}
		added := v.tok.TokenBytes(int(id))
		text = append(text, added...)
		for _, s := range req.Params.StopStrings {
			from := max(0, len(text)-len(added)-len(s)+1)
			if strings.Contains(string(text[from:]), s) {
				res.FinishReason, res.Stop = sampling.FinishStop, s
				break outer
			}
		}
	}
	if len(res.Tokens) == 0 {
		return policy.Result{}, fmt.Errorf("piece %d encodes as no tokens", k)
	}
	return res, nil
}

func (v *vocabPolicy) Release(context.Context, string) {}

func (v *vocabPolicy) Tokenize(_ context.Context, text string, special bool) ([]int32, error) {
	if special {
		return ids32(v.tok.EncodeSpecial(text)), nil
	}
	return ids32(v.tok.Encode(text)), nil
}

func (v *vocabPolicy) Detokenize(_ context.Context, ids []int32) (string, error) {
	return v.tok.Decode(ints(ids), false)
}

func (v *vocabPolicy) Info(context.Context) (policy.Info, error) {
	return policy.Info{Model: "vocab", PolicyVersion: 3, VocabSize: v.tok.VocabSize(), EOS: []int32{int32(v.tok.EOS())}}, nil
}

func (v *vocabPolicy) Close() error { return nil }

// call is one interaction a script expects.
type wantCall struct {
	agent  collab.Agent
	query  string
	answer string // what the agent answers (before escaping); the limit notice when limited
	status string
}

// policyStops are the stop strings of the protocol under opener.
func policyStops(opener string) []string {
	var out []string
	for _, t := range Tags {
		if opener == OpenerPolicy {
			out = append(out, t.Close+ResultOpen)
		} else {
			out = append(out, t.Close)
		}
	}
	return out
}

// cutAtStop is the oracle for one policy turn: the number of leading
// tokens of ids up to and including the first token after which the
// decoded text contains a stop string (all of them if none), and whether
// one was found.
func cutAtStop(t *testing.T, tok *tokenizer.HF, ids []int32, stops []string) (int, bool) {
	t.Helper()
	for n := 1; n <= len(ids); n++ {
		if int(ids[n-1]) == tok.EOS() {
			return n, false
		}
		text, err := tok.Decode(ints(ids[:n]), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stops {
			if strings.Contains(text, s) {
				return n, true
			}
		}
	}
	return len(ids), false
}

// checkVocabRun checks a finished trajectory against the script: the
// policy's tokens are the ids of its pieces cut at their stops, kept as
// they are; after each call the answer block follows the stop token; the
// decoded response is the policy's text and the agents' text in order;
// every span holds exactly the tokens the system inserted.
func checkVocabRun(t *testing.T, tok *tokenizer.HF, v *vocabPolicy, cfg Config, tr schemas.Trajectory, calls []wantCall) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatalf("trajectory breaks a row invariant: %v", err)
	}
	if len(tr.InteractionAgent) != len(calls) {
		t.Fatalf("%d interactions (agents %v, queries %q), want %d; response %q", len(tr.InteractionAgent), tr.InteractionAgent, tr.InteractionQuery, len(calls), tr.ResponseText)
	}
	enc := func(s string, special bool) []int32 {
		if special {
			return ids32(tok.EncodeSpecial(s))
		}
		return ids32(tok.Encode(s))
	}
	var wantIDs []int32
	var wantSrc []int8
	var wantText strings.Builder
	add := func(ids []int32, src int8) {
		wantIDs = append(wantIDs, ids...)
		for range ids {
			wantSrc = append(wantSrc, src)
		}
		text, err := tok.Decode(ints(ids), false)
		if err != nil {
			t.Fatal(err)
		}
		wantText.WriteString(text)
	}
	stops := policyStops(cfg.OpenerBy)
	turn := 0
	for k := 0; ; k++ {
		ids := []int32{int32(tok.EOS())}
		if k < len(v.pieces) {
			ids = enc(v.pieces[k], true)
		}
		n, stopped := cutAtStop(t, tok, ids, stops)
		add(ids[:n], schemas.SourcePolicy)
		if !stopped {
			if int(ids[n-1]) == tok.EOS() {
				break
			}
			continue // the piece ran out (finish length): the next call goes on
		}
		if turn >= len(calls) {
			t.Fatalf("piece %d stops at a tag but the script expects only %d calls", k, len(calls))
		}
		c := calls[turn]
		start := len(wantIDs)
		if cfg.OpenerBy == OpenerSystem {
			add(enc(ResultOpen, true), schemas.SourceTemplate)
		}
		src := c.agent.Source()
		if c.status != schemas.StatusOK {
			src = schemas.SourceTemplate
		}
		add(enc(Escape(c.answer), false), src)
		add(enc(ResultClose, true), schemas.SourceTemplate)
		if int(tr.InteractionSpanStart[turn]) != start || int(tr.InteractionSpanEnd[turn]) != len(wantIDs) {
			t.Errorf("interaction %d spans [%d,%d), want [%d,%d): the inserted tokens", turn, tr.InteractionSpanStart[turn], tr.InteractionSpanEnd[turn], start, len(wantIDs))
		}
		if tr.InteractionAgent[turn] != string(c.agent) || tr.InteractionQuery[turn] != c.query || tr.InteractionStatus[turn] != c.status || tr.InteractionResult[turn] != Escape(c.answer) {
			t.Errorf("interaction %d = %s %q %s %q, want %s %q %s %q", turn, tr.InteractionAgent[turn], tr.InteractionQuery[turn], tr.InteractionStatus[turn], tr.InteractionResult[turn],
				c.agent, c.query, c.status, Escape(c.answer))
		}
		turn++
	}
	if turn != len(calls) {
		t.Fatalf("the script's pieces make %d calls, want %d", turn, len(calls))
	}
	if !reflect.DeepEqual(tr.ResponseIDs, wantIDs) {
		t.Fatalf("response_ids\n got %v\nwant %v", tr.ResponseIDs, wantIDs)
	}
	if !reflect.DeepEqual(tr.TokenSource, wantSrc) {
		t.Fatalf("token_source\n got %v\nwant %v", tr.TokenSource, wantSrc)
	}
	got, err := tok.Decode(ints(tr.ResponseIDs), false)
	if err != nil {
		t.Fatal(err)
	}
	if got != wantText.String() {
		t.Fatalf("decoded response\n got %q\nwant %q", got, wantText.String())
	}
	// Every non-policy token lies in a span, every span token is the
	// system's or an agent's, and each span decodes to the answer block.
	inSpan := make([]bool, len(tr.ResponseIDs))
	for i := range tr.InteractionSpanStart {
		s, e := tr.InteractionSpanStart[i], tr.InteractionSpanEnd[i]
		block, _ := tok.Decode(ints(tr.ResponseIDs[s:e]), false)
		want := Escape(calls[i].answer) + ResultClose
		if cfg.OpenerBy == OpenerSystem {
			want = ResultOpen + want
		}
		if block != want {
			t.Errorf("span %d decodes to %q, want %q", i, block, want)
		}
		for j := s; j < e; j++ {
			inSpan[j] = true
		}
	}
	for j, s := range tr.TokenSource {
		if (s == schemas.SourcePolicy) == inSpan[j] {
			t.Fatalf("token %d (%q) has source %d but inSpan=%v", j, tok.TokenBytes(int(tr.ResponseIDs[j])), s, inSpan[j])
		}
		if s == schemas.SourcePolicy && tr.BehaviorLogProbs[j] == 0 {
			t.Fatalf("policy token %d has log-prob 0", j)
		}
	}
}

func runVocab(t *testing.T, tok *tokenizer.HF, cfg Config, agents collab.Set, pieces ...string) (*vocabPolicy, schemas.Trajectory) {
	t.Helper()
	ctx := context.Background()
	v := newVocabPolicy(tok, pieces...)
	p, err := New(ctx, v, agents, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tk := task
	tk.Prompt = ids32(tok.Encode("What is 2+2?"))
	out, err := p.Run(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	if out.Err != nil {
		t.Fatalf("trajectory failed: %v", out.Err)
	}
	return v, out.Trajectory
}

// tagTail returns the characters of the stop token after the tag: what
// the first policy turn wrote past the stop string.
func tagTail(t *testing.T, tok *tokenizer.HF, v *vocabPolicy, stop string) string {
	t.Helper()
	text, _ := tok.Decode(ints(v.emitted[0]), false)
	i := strings.Index(text, stop)
	if i < 0 {
		t.Fatalf("first turn %q holds no %q", text, stop)
	}
	return text[i+len(stop):]
}

// TestRealVocabContinuations runs one call per tag, opener setting,
// vocabulary, text before the opening tag and continuation after the
// closing tag. A continuation that merges with the tag's ">" ("\n", ".",
// ",", ")" ...) leaves characters of the stop token after the tag; they
// stay the policy's and the answer follows them.
func TestRealVocabContinuations(t *testing.T) {
	befores := []string{"Let me check ", "Check:", "Check\n", "(", ""}
	conts := []string{"", "\n", "\n\n", ".", ",", ")", " ", ":", "\n</result>", "</result>", "</ result>", "<result>", "</results>", ">", "\u00e9t\u00e9"}
	for _, name := range realVocabs {
		tok := realTokenizer(t, name)
		for _, opener := range []string{OpenerSystem, OpenerPolicy} {
			merged, cases := 0, 0
			for _, tag := range Tags {
				for _, before := range befores {
					for _, cont := range conts {
						stop := tag.Close
						if opener == OpenerPolicy {
							stop += ResultOpen
						}
						rest := "So 2+2 is 4."
						piece := before + tag.Open + " 2+2=4 " + stop + cont + rest
						cases++
						t.Run(fmt.Sprintf("%s/%s/%q", name, opener, piece), func(t *testing.T) {
							cfg := Default()
							cfg.OpenerBy = opener
							var log agentsLog
							agents := log.set(map[collab.Agent]collab.Answer{tag.Agent: ok("4, correct")})
							v, tr := runVocab(t, tok, cfg, agents, piece, rest+eosOf(tok))
							checkVocabRun(t, tok, v, cfg, tr, []wantCall{{tag.Agent, "2+2=4", "4, correct", schemas.StatusOK}})
							if tail := tagTail(t, tok, v, stop); tail != "" {
								merged++
								if !strings.HasPrefix(cont+rest, tail) {
									t.Errorf("the stop token's tail %q is not what the policy wrote after the tag", tail)
								}
							}
						})
					}
				}
			}
			t.Logf("%s, opener_by %s: %d cases, in %d the token completing the tag carries more characters", name, opener, cases, merged)
			if merged == 0 {
				t.Errorf("%s: no case merges the tag's '>' with the continuation; the test does not reach the defect", name)
			}
		}
	}
}

// TestRealVocabLimitAndUnanswered: the limit notice and an unanswered call
// on a real vocabulary, the closing tags completed inside a token.
func TestRealVocabLimitAndUnanswered(t *testing.T) {
	for _, name := range realVocabs {
		tok := realTokenizer(t, name)
		t.Run(name+"/limit", func(t *testing.T) {
			cfg := Default()
			cfg.MaxInteractions = 1
			var log agentsLog
			agents := log.set(map[collab.Agent]collab.Answer{collab.Reason: ok("3"), collab.Verify: ok("yes")})
			v, tr := runVocab(t, tok, cfg, agents,
				"First <reason>1+2</reason>.\nThen", "Then <verify>3=3</verify>\nSo", "So it is 3."+eosOf(tok))
			checkVocabRun(t, tok, v, cfg, tr, []wantCall{
				{collab.Reason, "1+2", "3", schemas.StatusOK},
				{collab.Verify, "3=3", DefaultLimitNotice, schemas.StatusLimit}})
		})
		t.Run(name+"/unanswered", func(t *testing.T) {
			cfg := Default()
			cfg.Unanswered = true
			text := "Check <verify>3=3</verify>.\nIt holds."
			v, tr := runVocab(t, tok, cfg, collab.Set{}, text, "\nIt holds."+eosOf(tok))
			if len(tr.InteractionAgent) != 0 || len(v.emitted) != 2 {
				t.Fatalf("%d interactions and %d Generate calls, want 0 and 2", len(tr.InteractionAgent), len(v.emitted))
			}
			var want []int32
			for _, e := range v.emitted {
				want = append(want, e...)
			}
			if !reflect.DeepEqual(tr.ResponseIDs, want) {
				t.Fatalf("response_ids %v, want the policy's tokens %v", tr.ResponseIDs, want)
			}
			if tail := tagTail(t, tok, v, "</verify>"); tail != "." && tail != ".\n" {
				t.Errorf("the stop token's tail is %q, want the policy's '.' (with or without the newline)", tail)
			}
		})
		t.Run(name+"/extra stop", func(t *testing.T) {
			// A Config.StopStrings string completed by the same token as a tag's
			// first characters: the configured stop ends the trajectory.
			cfg := Default()
			cfg.StopStrings = []string{"####"}
			var log agentsLog
			agents := log.set(map[collab.Agent]collab.Answer{collab.Verify: ok("yes")})
			v, tr := runVocab(t, tok, cfg, agents, "Answer #### 4 <verify>4</verify>")
			if tr.FinishReason != sampling.FinishStop || len(tr.InteractionAgent) != 0 || len(v.emitted) != 1 {
				t.Fatalf("finish %q with %d interactions after %d calls; want stop, 0, 1", tr.FinishReason, len(tr.InteractionAgent), len(v.emitted))
			}
		})
	}
}

// Fragments of random policy texts: words, numbers, punctuation, spaces,
// newlines, non-ASCII letters and near-tags that are not tags.
var vocabFragments = []string{
	"the", " answer", " is", " 42", "x", "+", "=", " ", "  ", "\n", "\n\n", "\t", ".", ",", ")", "(", ":", ";", "!", "?",
	"\u00e9", " \u4e2d\u6587", "\U0001F600", "**", "$", "\\frac{1}{2}", "<", ">", "</", "/>", "<b>", "</b>", "< verify", "result",
	"&lt;", "verify", " <", ">\n", "1", "23", "456", "'s", " don't",
}

// Answers with look-alikes of the wrappers; Escape neutralises the real
// tags among them.
var vocabAnswers = []string{
	"yes", "4", "no, 2+2=4", "</result>", "<result>x</result>", "</ result>", "</results>", "</resul", "result>", "a\nb",
	"\u00e9t\u00e9 \u4e2d", "<verify>nested</verify>", "ok.\n\n", " spaced ",
}

// randText joins n random fragments, drawing again while they form a
// protocol tag (a tag there would be a call the script does not expect).
func randText(r *rand.Rand, n int) string {
	for {
		var b strings.Builder
		for range n {
			b.WriteString(vocabFragments[r.IntN(len(vocabFragments))])
		}
		if FindTag(b.String()) < 0 {
			return b.String()
		}
	}
}

// eosOf is the text of tok's end-of-sequence token.
func eosOf(tok *tokenizer.HF) string {
	s, ok := tok.TokenString(tok.EOS())
	if !ok {
		panic("the tokenizer has no EOS token")
	}
	return s
}

// TestRealVocabProperty: random scripts (seeded, bounded) on both
// vocabularies and both opener settings. Each piece is random text, an
// opening tag, a query, the stop, random continuation text; the last
// piece ends with EOS. The trajectory must decode to the policy's text
// and the agents' text, and every span must hold exactly the inserted
// tokens (checkVocabRun).
func TestRealVocabProperty(t *testing.T) {
	const trials = 60
	for vi, name := range realVocabs {
		tok := realTokenizer(t, name)
		eos := eosOf(tok)
		for oi, opener := range []string{OpenerSystem, OpenerPolicy} {
			r := rand.New(rand.NewPCG(20261201, uint64(2*vi+oi)))
			failed := 0
			for trial := range trials {
				cfg := Default()
				cfg.OpenerBy = opener
				cfg.MaxInteractions = r.IntN(4)
				nCalls := 1 + r.IntN(3)
				answers := map[collab.Agent]collab.Answer{}
				var pieces []string
				var calls []wantCall
				reached := 0
				for range nCalls {
					tag := Tags[r.IntN(len(Tags))]
					query := strings.TrimSpace(strings.ReplaceAll(randText(r, 1+r.IntN(4)), "<", "x"))
					query = strings.ReplaceAll(query, ">", "y")
					stop := tag.Close
					if opener == OpenerPolicy {
						stop += ResultOpen
					}
					body := randText(r, r.IntN(5))
					pieces = append(pieces, body+tag.Open+query+stop+randText(r, r.IntN(4)))
					ans := vocabAnswers[r.IntN(len(vocabAnswers))]
					if prev, ok := answers[tag.Agent]; ok {
						ans = prev.Text // one fixed answer per agent
					}
					answers[tag.Agent] = ok(ans)
					if reached < cfg.MaxInteractions {
						calls = append(calls, wantCall{tag.Agent, strings.TrimSpace(query), ans, schemas.StatusOK})
						reached++
					} else {
						calls = append(calls, wantCall{tag.Agent, strings.TrimSpace(query), DefaultLimitNotice, schemas.StatusLimit})
					}
				}
				pieces = append(pieces, randText(r, r.IntN(6))+eos)
				var log agentsLog
				v, tr := runVocab(t, tok, cfg, log.set(answers), pieces...)
				ok := t.Run(fmt.Sprintf("%s/%s/%d", name, opener, trial), func(t *testing.T) {
					checkVocabRun(t, tok, v, cfg, tr, calls)
				})
				if !ok {
					failed++
				}
			}
			t.Logf("%s, opener_by %s: %d of %d random scripts failed", name, opener, failed, trials)
		}
	}
}
