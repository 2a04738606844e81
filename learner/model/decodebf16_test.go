package model

import (
	"math"
	"strings"
	"testing"
)

func needBF16Decode(t *testing.T) {
	t.Helper()
	if ok, why := BF16DecodeAvailable(); !ok {
		t.Skipf("no bfloat16 products here: %s", why)
	}
}

// bf16Families are a model of each architecture the decoder runs, peaked
// (see peakedModel) and with every weight rounded to bfloat16, as a model
// loaded from a bfloat16 checkpoint holds them.
func bf16Families(t *testing.T) map[string]*Model {
	t.Helper()
	ms := map[string]*Model{"tiny_qwen2_tied": peakedModel(t, tinyConfig(), 21)}
	for _, name := range []string{"tiny_qwen2", "tiny_qwen3", "tiny_llama3"} {
		cfg, err := LoadConfig("testdata/" + name + "_config.json")
		if err != nil {
			t.Fatal(err)
		}
		ms[name] = peakedModel(t, cfg, 22)
	}
	for name, m := range ms {
		ms[name] = bf16Copy(t, m)
	}
	return ms
}

// TestDecodeBF16Tolerance decodes a prompt and 40 greedy steps on every
// family in float32 and in bfloat16 and holds the logits and the
// log-probabilities of the chosen tokens to the derived bound (a
// log-softmax moves by at most twice the largest change of its logits),
// and the greedy tokens to agree wherever float32's top two are further
// apart than twice the bound.
func TestDecodeBF16Tolerance(t *testing.T) {
	needBF16Decode(t)
	for name, m := range bf16Families(t) {
		t.Run(name, func(t *testing.T) {
			tol := BF16LogitBound(m)
			prompt := []int32{1, 7, 3, 9, 22, 4, 0, 5}
			c32 := m.NewKVCache()
			l32, err := m.Extend([]*KVCache{c32}, [][]int32{prompt}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.DecodeBF16(true); err != nil {
				t.Fatal(err)
			}
			defer m.DecodeBF16(false)
			c16 := m.NewKVCache()
			l16, err := m.Extend([]*KVCache{c16}, [][]int32{prompt}, nil)
			if err != nil {
				t.Fatal(err)
			}
			worst, worstLP := 0.0, 0.0
			for step := range 40 {
				d, at := maxDiff(l16, l32)
				if d > tol {
					t.Fatalf("step %d: bfloat16 logit %d is %g, float32 %g: %.3g apart, beyond the bound %.3g", step, at, l16[at], l32[at], d, tol)
				}
				worst = max(worst, d)
				tok := argmax(l32)
				lp32 := float64(l32[tok] - LogSumExp(l32))
				lp16 := float64(l16[tok] - LogSumExp(l16))
				if e := math.Abs(lp16 - lp32); e > 2*tol {
					t.Fatalf("step %d: log-probability of token %d is %g in bfloat16, %g in float32", step, tok, lp16, lp32)
				} else {
					worstLP = max(worstLP, e)
				}
				if got := argmax(l16); got != tok && margin(l32) > 2*tol {
					t.Fatalf("step %d: bfloat16 picks token %d, float32 %d, whose lead is %g", step, got, tok, margin(l32))
				}
				m.DecodeBF16(false)
				if l32, err = m.Extend([]*KVCache{c32}, [][]int32{{tok}}, l32); err != nil {
					t.Fatal(err)
				}
				if err := m.DecodeBF16(true); err != nil {
					t.Fatal(err)
				}
				if l16, err = m.Extend([]*KVCache{c16}, [][]int32{{tok}}, l16); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("largest logit difference %.3g, log-probability %.3g; bound %.3g", worst, worstLP, tol)
		})
	}
}

// margin is how far the largest logit leads the second.
func margin(row []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range row {
		if x := float64(v); x > a {
			a, b = x, a
		} else if x > b {
			b = x
		}
	}
	return a - b
}

// TestDecodeBF16BatchInvariant: in bfloat16 too, a sequence's logits are
// the same bits whatever other sequences share its step.
func TestDecodeBF16BatchInvariant(t *testing.T) {
	needBF16Decode(t)
	for name, m := range bf16Families(t) {
		t.Run(name, func(t *testing.T) {
			if err := m.DecodeBF16(true); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(m.DecodeProduct(), "bfloat16") {
				t.Fatalf("DecodeProduct says %q", m.DecodeProduct())
			}
			checkExtendBitwise(t, m)
		})
	}
}

// TestDecodeBF16Off: turned off, Extend is the float32 path again, bit for
// bit; a model held in bfloat16 for scoring refuses it.
func TestDecodeBF16Off(t *testing.T) {
	needBF16Decode(t)
	m := peakedModel(t, tinyConfig(), 4)
	prompt := [][]int32{{3, 1, 4, 1, 5}}
	want, err := m.Extend([]*KVCache{m.NewKVCache()}, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DecodeBF16(true); err != nil || !m.DecodesInBF16() {
		t.Fatalf("DecodeBF16(true): %v, DecodesInBF16 %v", err, m.DecodesInBF16())
	}
	m.DecodeBF16(false)
	got, err := m.Extend([]*KVCache{m.NewKVCache()}, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d after DecodeBF16(false) is %g, before %g", i, got[i], want[i])
		}
	}
	n := bf16Families(t)["tiny_qwen2_tied"]
	if !n.holdBF16() {
		t.Fatal("a bfloat16-exact model was not held in bfloat16")
	}
	if err := n.DecodeBF16(true); err == nil {
		t.Fatal("DecodeBF16 on a model held in bfloat16 for scoring: no error")
	}
}

// TestDecodeBF16KVCache: a cache made while the model decodes in
// bfloat16 holds its keys and values in half the bytes of a float32 one
// (the model's BytesPerToken says so), and Extend refuses a cache of the
// other precision with an error naming both and the fix, changing no
// cache.
func TestDecodeBF16KVCache(t *testing.T) {
	needBF16Decode(t)
	m := peakedModel(t, tinyConfig(), 6)
	prompt := [][]int32{{3, 1, 4, 1, 5, 9, 2}}
	c32 := m.NewKVCache()
	if _, err := m.Extend([]*KVCache{c32}, prompt, nil); err != nil {
		t.Fatal(err)
	}
	per32 := m.BytesPerToken()
	if err := m.DecodeBF16(true); err != nil {
		t.Fatal(err)
	}
	defer m.DecodeBF16(false)
	c16 := m.NewKVCache()
	if _, err := m.Extend([]*KVCache{c16}, prompt, nil); err != nil {
		t.Fatal(err)
	}
	if got := m.BytesPerToken(); 2*got != per32 {
		t.Errorf("BytesPerToken in bfloat16 is %d, in float32 %d: not half", got, per32)
	}
	// Both caches hold the same capacity (one growth chunk); the tokens
	// take 4 bytes a position in either.
	toks := 4 * cap(c16.tokens)
	if got, f32 := c16.Bytes()-toks, c32.Bytes()-toks; 2*got != f32 {
		t.Errorf("a bfloat16 cache holds %d bytes of keys and values, a float32 one %d: not half", got, f32)
	}
	_, err := m.Extend([]*KVCache{c32}, [][]int32{{7}}, nil)
	if err == nil || !strings.Contains(err.Error(), "float32") || !strings.Contains(err.Error(), "NewKVCache") {
		t.Fatalf("Extend of a float32 cache on a bfloat16 model: %v, want an error naming float32 and NewKVCache", err)
	}
	if c32.Len() != len(prompt[0]) || c16.Len() != len(prompt[0]) {
		t.Fatalf("a refused step changed the caches: %d and %d positions, want %d", c32.Len(), c16.Len(), len(prompt[0]))
	}
	m.DecodeBF16(false)
	if _, err := m.Extend([]*KVCache{c16}, [][]int32{{7}}, nil); err == nil {
		t.Fatal("Extend of a bfloat16 cache on a float32 model: no error")
	}
}

// TestDecodeBF16Only: a model that dropped its float32 weights decodes the
// same bits as one that keeps them (the embedding of a bfloat16 model
// widens back exactly), and refuses every other pass.
func TestDecodeBF16Only(t *testing.T) {
	needBF16Decode(t)
	keep, drop := bf16Families(t), bf16Families(t)
	for name, a := range keep {
		t.Run(name, func(t *testing.T) {
			b := drop[name]
			if err := a.DecodeBF16(true); err != nil {
				t.Fatal(err)
			}
			if err := b.DecodeBF16Only(); err != nil {
				t.Fatal(err)
			}
			prompt := [][]int32{{2, 7, 1, 8, 2, 8, 1}}
			ca, cb := a.NewKVCache(), b.NewKVCache()
			la, err := a.Extend([]*KVCache{ca}, prompt, nil)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := b.Extend([]*KVCache{cb}, prompt, nil)
			if err != nil {
				t.Fatal(err)
			}
			for step := range 10 {
				for i := range la {
					if la[i] != lb[i] {
						t.Fatalf("step %d: logit %d is %g with the float32 weights kept, %g without", step, i, la[i], lb[i])
					}
				}
				tok := argmax(la)
				if la, err = a.Extend([]*KVCache{ca}, [][]int32{{tok}}, la); err != nil {
					t.Fatal(err)
				}
				if lb, err = b.Extend([]*KVCache{cb}, [][]int32{{tok}}, lb); err != nil {
					t.Fatal(err)
				}
			}
			batch := Batch{Tokens: []int32{1, 2, 3}}
			if _, err := b.Forward(batch); err == nil {
				t.Error("Forward ran on a decode-only model")
			}
			if _, err := b.Logits(batch); err == nil {
				t.Error("Logits ran on a decode-only model")
			}
			if _, _, err := b.Score(batch); err == nil {
				t.Error("Score ran on a decode-only model")
			}
			if err := b.DecodeBF16(false); err == nil || !strings.Contains(err.Error(), "DecodeBF16Only") {
				t.Errorf("DecodeBF16(false) on a decode-only model: %v", err)
			}
			if b.HoldBF16() {
				t.Error("HoldBF16 held a decode-only model")
			}
		})
	}
}
