package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func tinyConfig() Config {
	return Config{ModelType: "qwen2", HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, VocabSize: 50, MaxPositionEmbeddings: 200, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, HiddenAct: "silu"}
}

func randomBatch(r *rand.Rand, V int, lens ...int) Batch {
	n := 0
	for _, l := range lens {
		n += l
	}
	b := Batch{Tokens: make([]int32, n), SeqLens: lens}
	for i := range b.Tokens {
		b.Tokens[i] = int32(r.IntN(V))
	}
	return b
}

func TestParseConfigDefaultsAndErrors(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 4 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.HiddenAct != "silu" || c.QKVBias() || c.OBias() {
		t.Errorf("defaults not applied: %+v", c)
	}
	bad := map[string]string{
		`{"model_type":"mistral"}`: "model_type mistral is not supported (supported: llama, qwen2, qwen3)",
		`{"model_type":"qwen2","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":9,"max_position_embeddings":9}`:                                                                                                           "num_key_value_heads 3 does not divide num_attention_heads 4",
		`{"model_type":"qwen2","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":9,"rope_scaling":{"type":"yarn"}}`:                                                                                                    "rope_scaling",
		`{"model_type":"llama","hidden_size":12,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":9}`:                                                                                                                                   "odd",
		`{"model_type":"llama","hidden_size":16,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":9,"hidden_act":"gelu"}`:                                                                                                               "hidden_act",
		`{"model_type":"llama","hidden_size":16,"intermediate_size":0,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":9}`:                                                                                                                                   "intermediate_size",
		`{"model_type":"llama","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":9,"max_position_embeddings":9,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":8192}}`: "high_freq_factor",
	}
	for js, want := range bad {
		if _, err := ParseConfig([]byte(js)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) error = %v, want one mentioning %q", js, err, want)
		}
	}
}

func TestNewLayoutAndInit(t *testing.T) {
	cfg := tinyConfig()
	m, err := New(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	d := dimsOf(cfg)
	want := d.V*d.C + d.C + d.L*(2*d.C+d.QKV*d.C+d.QKV+d.C*d.QD+3*d.C*d.F)
	if m.NumParams() != want {
		t.Errorf("NumParams = %d, want %d", m.NumParams(), want)
	}
	params, grads := m.Params(), m.Grads()
	if len(params) != len(grads) || len(params) != 2+d.L*12 {
		t.Fatalf("%d params and %d grads, want %d each", len(params), len(grads), 2+d.L*12)
	}
	for i, p := range params {
		if p.Name != grads[i].Name || len(p.Data) != len(grads[i].Data) {
			t.Errorf("param %d %s does not line up with grad %s", i, p.Name, grads[i].Name)
		}
		if p.Name == "model.layers.1.self_attn.q_proj.weight" {
			var ss float64
			for _, v := range p.Data {
				ss += float64(v) * float64(v)
			}
			if std := math.Sqrt(ss / float64(len(p.Data))); math.Abs(std-0.02) > 0.003 {
				t.Errorf("%s std %.4f, want 0.02", p.Name, std)
			}
		}
	}
	// Untied and Llama with attention_bias add lm_head and o_proj.bias.
	cfg.TieWordEmbeddings, cfg.ModelType, cfg.AttentionBias = false, "llama", true
	m2, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range m2.Params() {
		names[p.Name] = true
	}
	for _, n := range []string{"lm_head.weight", "model.layers.0.self_attn.o_proj.bias", "model.layers.1.self_attn.v_proj.bias"} {
		if !names[n] {
			t.Errorf("untied llama with attention_bias lacks %s", n)
		}
	}
}

func TestFromTensorsErrors(t *testing.T) {
	cfg := tinyConfig()
	m, _ := New(cfg, 1)
	full := map[string]NamedTensor{}
	for _, p := range m.Params() {
		full[p.Name] = p
	}
	missing := copyMap(full)
	delete(missing, "model.norm.weight")
	wrong := copyMap(full)
	wrong["model.norm.weight"] = NamedTensor{Name: "model.norm.weight", Shape: []int{7}, Data: make([]float32, 7)}
	extra := copyMap(full)
	extra["model.layers.0.self_attn.q_norm.weight"] = NamedTensor{Shape: []int{8}, Data: make([]float32, 8)}
	for name, c := range map[string]struct {
		in   map[string]NamedTensor
		want string
	}{"missing": {missing, "model.norm.weight"}, "shape": {wrong, "shape [7]"}, "extra": {extra, "q_norm"}} {
		if _, err := FromTensors(cfg, c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, c.want)
		}
	}
	tied := copyMap(full)
	tied["lm_head.weight"] = full["model.embed_tokens.weight"]
	tied["model.rotary_emb.inv_freq"] = NamedTensor{Shape: []int{4}, Data: make([]float32, 4)}
	if _, err := FromTensors(cfg, tied); err != nil {
		t.Errorf("tied lm_head and inv_freq should be ignored: %v", err)
	}
}

func copyMap(m map[string]NamedTensor) map[string]NamedTensor {
	out := map[string]NamedTensor{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestBatchErrors(t *testing.T) {
	m, _ := New(tinyConfig(), 1)
	cases := map[string]struct {
		b    Batch
		want string
	}{
		"empty":      {Batch{}, "no tokens"},
		"token":      {Batch{Tokens: []int32{1, 50}}, "outside the vocabulary"},
		"lens":       {Batch{Tokens: []int32{1, 2, 3}, SeqLens: []int{1, 1}}, "sum to 2"},
		"zero len":   {Batch{Tokens: []int32{1, 2}, SeqLens: []int{2, 0}}, "positive"},
		"targets":    {Batch{Tokens: []int32{1, 2}, Targets: []int32{1}}, "1 targets for 2 tokens"},
		"target val": {Batch{Tokens: []int32{1, 2}, Targets: []int32{1, -2}}, "outside [-1"},
		"too long":   {Batch{Tokens: make([]int32, 201)}, "max_position_embeddings"},
	}
	for name, c := range cases {
		if _, err := m.Forward(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, c.want)
		}
	}
}

// Sequences packed into one batch give the same log-probs as each run
// alone: positions restart and attention stays inside a sequence. One
// sequence is longer than the attention's query block.
func TestPackedEqualsSeparate(t *testing.T) {
	m, _ := New(tinyConfig(), 3)
	for _, p := range m.Params() { // larger weights: non-trivial attention
		for i := range p.Data {
			p.Data[i] *= 10
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	packed := randomBatch(r, 50, 5, 80, 1, 17)
	all, err := m.Forward(packed)
	if err != nil {
		t.Fatal(err)
	}
	start := 0
	for i, n := range packed.SeqLens {
		one, err := m.Forward(Batch{Tokens: packed.Tokens[start : start+n]})
		if err != nil {
			t.Fatal(err)
		}
		compare(t, "sequence "+string(rune('0'+i))+" log-probs", all.LogProbs[start:start+n], one.LogProbs, tolerance{abs: 1e-5, rel: 1e-5})
		one.Release()
		start += n
	}
}

// Backward adds into the gradients: two passes give twice one pass; a
// second Backward on the same activations is an error.
func TestBackwardAccumulates(t *testing.T) {
	m, _ := New(tinyConfig(), 4)
	r := rand.New(rand.NewPCG(2, 2))
	b := randomBatch(r, 50, 30, 20)
	g := make([]float32, 50)
	for i := range g {
		g[i] = float32(r.NormFloat64())
	}
	run := func() {
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(a, g); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(a, g); err == nil || !strings.Contains(err.Error(), "already differentiated") {
			t.Fatalf("second Backward on the same activations: %v, want an error", err)
		}
	}
	m.ZeroGrads()
	run()
	once := append([]float32(nil), m.GradData()...)
	run()
	twice := make([]float32, len(once))
	for i, v := range once {
		twice[i] = 2 * v
	}
	compare(t, "accumulated gradient", m.GradData(), twice, tolerance{abs: 1e-6, rel: 1e-5})
	if _, err := m.Forward(Batch{Tokens: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	m.ZeroGrads()
	for i, v := range m.GradData() {
		if v != 0 {
			t.Fatalf("ZeroGrads left gradient %d = %v", i, v)
		}
	}
}

// Gradients agree with central finite differences of the loss computed in
// float64 from the forward pass (a check independent of the fixtures).
// The second configuration has heads of 12 (4 heads, 48 wide, over a
// hidden size of 32) and Llama's biases on q, k, v and o.
func TestGradientFiniteDifferences(t *testing.T) {
	cfg := tinyConfig()
	cfg.TieWordEmbeddings = false
	wide := cfg
	wide.ModelType, wide.HeadDim, wide.AttentionBias = "llama", 12, true
	for _, c := range []Config{cfg, wide} {
		t.Run(fmt.Sprintf("%s_head%d", c.ModelType, c.Head()), func(t *testing.T) { gradientFiniteDifferences(t, c) })
	}
}

func gradientFiniteDifferences(t *testing.T, cfg Config) {
	m, err := New(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d := dimsOf(cfg); cfg.HeadDim > 0 && d.QD == d.C {
		t.Fatalf("head_dim %d gives q width %d = hidden_size: not the case under test", cfg.HeadDim, d.QD)
	}
	for _, p := range m.Params() {
		if strings.HasSuffix(p.Name, ".bias") {
			for i := range p.Data {
				p.Data[i] = 0.1 * float32(i%7-3)
			}
		}
	}
	for _, p := range m.Params() {
		for i := range p.Data {
			p.Data[i] *= 4
		}
	}
	r := rand.New(rand.NewPCG(3, 3))
	b := randomBatch(r, 50, 70, 6) // 70: two query blocks of attention
	w := make([]float32, 76)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	loss := func() float64 {
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release()
		var s float64
		for i, lp := range a.LogProbs {
			s += float64(w[i]) * float64(lp)
		}
		return s
	}
	m.ZeroGrads()
	a, _ := m.Forward(b)
	if err := m.Backward(a, w); err != nil {
		t.Fatal(err)
	}
	params, grads := m.Params(), m.Grads()
	const h = 4e-3
	for pi, p := range params {
		for k := 0; k < 3; k++ {
			i := r.IntN(len(p.Data))
			old := p.Data[i]
			p.Data[i] = old + h
			up := loss()
			p.Data[i] = old - h
			down := loss()
			p.Data[i] = old
			fd := (up - down) / (2 * h)
			got := float64(grads[pi].Data[i])
			// float32 forward: the loss (|loss| ~ 30) is rounded to ~2e-6,
			// which over 2h is ~3e-4, plus the O(h^2) truncation of the
			// central difference; a wrong gradient is off by far more.
			if math.Abs(fd-got) > 1e-2+1e-2*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %v, finite difference %v", p.Name, i, got, fd)
			}
		}
	}
}

// The backward pass gives the same gradients whether the forward pass kept
// the attention probabilities and the MLP's hidden activation or not. Only
// rounding differs: kept probabilities are exp(s - max)/sum, recomputed
// ones exp(s - lse) (the hidden activation is recomputed bit for bit).
func TestActivationsKeptOrRecomputed(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(8, 9))
	b := randomBatch(r, 50, 150, 64, 7)
	w := make([]float32, len(b.Tokens))
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	grads := func(keep int) [][]float32 {
		defer func(c, h int) { keepProbsFloats, keepHiddenFloats = c, h }(keepProbsFloats, keepHiddenFloats)
		keepProbsFloats, keepHiddenFloats = keep, keep
		m, _ := New(cfg, 5)
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		if kept := a.extra[0].probs != nil && a.layers[0].H != nil; kept != (keep > 0) {
			t.Fatalf("budget %d: activations kept = %v", keep, kept)
		}
		if err := m.Backward(a, w); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for _, g := range m.Grads() {
			out = append(out, g.Data)
		}
		return out
	}
	kept, recomputed := grads(1<<22), grads(0)
	for i := range kept {
		var worst, norm float64
		for j := range kept[i] {
			worst = max(worst, math.Abs(float64(kept[i][j]-recomputed[i][j])))
			norm = max(norm, math.Abs(float64(recomputed[i][j])))
		}
		if worst > 1e-4*norm+1e-7 {
			t.Errorf("gradient %d: kept and recomputed probabilities differ by %g (largest entry %g)", i, worst, norm)
		}
	}
}

func TestLlama2CErrors(t *testing.T) {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, []int32{16, 32, 1, 4, 2, 10, 8})
	binary.Write(&buf, binary.LittleEndian, make([]float32, 100))
	if _, _, err := ReadLlama2C(bytes.NewReader(buf.Bytes())); err == nil || !strings.Contains(err.Error(), "end early") {
		t.Errorf("truncated file: %v, want an error saying the weights end early", err)
	}
	if _, _, err := ReadLlama2C(bytes.NewReader([]byte{1, 2})); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("short header: %v", err)
	}
	var bad bytes.Buffer
	binary.Write(&bad, binary.LittleEndian, []int32{16, 32, 1, 4, 3, 10, 8})
	if _, _, err := ReadLlama2C(&bad); err == nil || !strings.Contains(err.Error(), "num_key_value_heads") {
		t.Errorf("bad header: %v", err)
	}
}

// Concurrent forward passes on one model give the same results as serial
// ones (run with -race to check the buffer pool and rotary table).
func TestConcurrentForward(t *testing.T) {
	m, _ := New(tinyConfig(), 6)
	r := rand.New(rand.NewPCG(4, 4))
	batches := []Batch{randomBatch(r, 50, 40, 7), randomBatch(r, 50, 150), randomBatch(r, 50, 3, 3, 90)}
	want := make([][]float32, len(batches))
	for i, b := range batches {
		a, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = a.LogProbs
		a.Release()
	}
	fresh, _ := New(tinyConfig(), 6) // empty rotary table and pool
	got := make([][]float32, len(batches))
	done := make(chan error, len(batches))
	for i, b := range batches {
		go func() {
			a, err := fresh.Forward(b)
			if err == nil {
				got[i] = a.LogProbs
				a.Release()
			}
			done <- err
		}()
	}
	for range batches {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := range batches {
		compare(t, "concurrent batch log-probs", got[i], want[i], tolerance{abs: 1e-6, rel: 1e-6})
	}
}

// Every architecture the config layer accepts builds: qwen3's q/k norm,
// Llama 3's RoPE scaling, plain RoPE spelled either way, a head dimension
// other than hidden_size / heads.
func TestAcceptedArchitecturesBuild(t *testing.T) {
	const base = `"hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":50,"max_position_embeddings":64`
	for _, js := range []string{
		`{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"default"}}`,
		`{"model_type":"llama",` + base + `,"rope_scaling":{"type":"default"}}`,
		`{"model_type":"qwen2",` + base + `,"head_dim":16}`,
		`{"model_type":"qwen3",` + base + `,"head_dim":16}`,
		`{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}`,
	} {
		cfg, err := ParseConfig([]byte(js))
		if err != nil {
			t.Fatalf("ParseConfig(%s): %v", js, err)
		}
		if _, err := New(cfg, 1); err != nil {
			t.Errorf("New(%s): %v", js, err)
		}
	}
}
