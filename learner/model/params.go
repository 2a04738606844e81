package model

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// NamedTensor is one parameter (or its gradient) under its Hugging Face
// name, row-major as Hugging Face stores it (a linear weight is [out, in]).
// Data aliases the model's storage.
type NamedTensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// spec is a tensor's place in the flat parameter buffer.
type spec struct {
	name  string
	shape []int
	off   int
}

func (s spec) size() int {
	n := 1
	for _, d := range s.shape {
		n *= d
	}
	return n
}

// layout lists every parameter of cfg in storage order. Within a layer the
// q, k, v weights (and their biases) are adjacent so that one matrix
// multiply computes all three, and so are gate and up.
func layout(cfg Config) []spec {
	d := dimsOf(cfg)
	var out []spec
	off := 0
	add := func(name string, shape ...int) {
		s := spec{name: name, shape: shape, off: off}
		out = append(out, s)
		off += s.size()
	}
	add("model.embed_tokens.weight", d.V, d.C)
	for l := 0; l < d.L; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", d.C)
		add(p+"self_attn.q_proj.weight", d.QD, d.C)
		add(p+"self_attn.k_proj.weight", d.KD, d.C)
		add(p+"self_attn.v_proj.weight", d.KD, d.C)
		if cfg.QKVBias() {
			add(p+"self_attn.q_proj.bias", d.QD)
			add(p+"self_attn.k_proj.bias", d.KD)
			add(p+"self_attn.v_proj.bias", d.KD)
		}
		add(p+"self_attn.o_proj.weight", d.C, d.QD)
		if cfg.OBias() {
			add(p+"self_attn.o_proj.bias", d.C)
		}
		if cfg.QKNorm() {
			add(p+"self_attn.q_norm.weight", d.D)
			add(p+"self_attn.k_norm.weight", d.D)
		}
		add(p+"post_attention_layernorm.weight", d.C)
		add(p+"mlp.gate_proj.weight", d.F, d.C)
		add(p+"mlp.up_proj.weight", d.F, d.C)
		add(p+"mlp.down_proj.weight", d.C, d.F)
	}
	add("model.norm.weight", d.C)
	if !cfg.TieWordEmbeddings {
		add("lm_head.weight", d.V, d.C)
	}
	return out
}

// weights are typed views into one flat buffer (parameters or gradients).
type weights struct {
	flat   []float32
	emb    []float32 // [V, C]
	head   []float32 // [V, C]; aliases emb when tied
	norm   []float32 // [C]
	layers []layerWeights
}

type layerWeights struct {
	inNorm, postNorm []float32 // [C]
	qkv              []float32 // [QKV, C]: q_proj, k_proj, v_proj stacked
	qkvBias          []float32 // [QKV] or nil
	o                []float32 // [C, QD]
	oBias            []float32 // [C] or nil
	qkNorm           []float32 // [2D]: q_norm then k_norm, or nil
	gateUp           []float32 // [2F, C]: gate_proj, up_proj stacked
	down             []float32 // [C, F]
}

// Span is where one tensor the model computes with lies in the flat
// parameter (or gradient) buffer: Len floats from Off; Len 0 where the
// model has no such tensor (a bias it does not use).
type Span struct{ Off, Len int }

// LayerSpans are one layer's tensors as the model computes with them: QKV
// spans q_proj, k_proj and v_proj (stored adjacent), GateUp gate_proj and
// up_proj, QKNorm q_norm and k_norm (Qwen3's per-head norms; Len 0 for
// other models).
type LayerSpans struct {
	InNorm, PostNorm, QKV, QKVBias, O, OBias, GateUp, Down Span
	QKNorm                                                 Span
}

// Spans are the model's tensors in the flat buffer; Head is Emb when the
// embeddings are tied.
type Spans struct {
	Emb, Head, Norm Span
	Layers          []LayerSpans
}

// spansOf places cfg's tensors in the layout of specs.
func spansOf(cfg Config, specs []spec) Spans {
	byName := map[string]spec{}
	for _, s := range specs {
		byName[s.name] = s
	}
	d := dimsOf(cfg)
	at := func(name string, n int) Span {
		s, ok := byName[name]
		if !ok {
			return Span{}
		}
		return Span{s.off, n}
	}
	var sp Spans
	sp.Emb = at("model.embed_tokens.weight", d.V*d.C)
	sp.Head = sp.Emb
	if !cfg.TieWordEmbeddings {
		sp.Head = at("lm_head.weight", d.V*d.C)
	}
	sp.Norm = at("model.norm.weight", d.C)
	for l := 0; l < d.L; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		ls := LayerSpans{
			InNorm:   at(p+"input_layernorm.weight", d.C),
			PostNorm: at(p+"post_attention_layernorm.weight", d.C),
			QKV:      at(p+"self_attn.q_proj.weight", d.QKV*d.C),
			O:        at(p+"self_attn.o_proj.weight", d.C*d.QD),
			OBias:    at(p+"self_attn.o_proj.bias", d.C),
			GateUp:   at(p+"mlp.gate_proj.weight", 2*d.F*d.C),
			Down:     at(p+"mlp.down_proj.weight", d.C*d.F),
		}
		if cfg.QKVBias() {
			ls.QKVBias = at(p+"self_attn.q_proj.bias", d.QKV)
		}
		if cfg.QKNorm() {
			ls.QKNorm = at(p+"self_attn.q_norm.weight", 2*d.D)
		}
		sp.Layers = append(sp.Layers, ls)
	}
	return sp
}

func newWeights(cfg Config, specs []spec) weights {
	last := specs[len(specs)-1]
	return viewWeights(cfg, specs, make([]float32, last.off+last.size()))
}

// viewWeights is the typed views of cfg's tensors in flat.
func viewWeights(cfg Config, specs []spec, flat []float32) weights {
	w := weights{flat: flat}
	view := func(s Span) []float32 {
		if s.Len == 0 {
			return nil
		}
		return w.flat[s.Off : s.Off+s.Len : s.Off+s.Len]
	}
	sp := spansOf(cfg, specs)
	w.emb, w.head, w.norm = view(sp.Emb), view(sp.Head), view(sp.Norm)
	for _, ls := range sp.Layers {
		w.layers = append(w.layers, layerWeights{
			inNorm: view(ls.InNorm), postNorm: view(ls.PostNorm), qkv: view(ls.QKV), qkvBias: view(ls.QKVBias),
			o: view(ls.O), oBias: view(ls.OBias), gateUp: view(ls.GateUp), down: view(ls.Down),
			qkNorm: view(ls.QKNorm),
		})
	}
	return w
}

func (w weights) named(specs []spec) []NamedTensor {
	out := make([]NamedTensor, len(specs))
	for i, s := range specs {
		out[i] = NamedTensor{Name: s.name, Shape: append([]int(nil), s.shape...), Data: w.flat[s.off : s.off+s.size() : s.off+s.size()]}
	}
	return out
}

// Model holds the parameters, their gradients and the rotary tables of one
// decoder-only transformer. The gradients are allocated by the first pass
// that needs them (Backward, Grads, GradData): a model that is only
// evaluated (a frozen reference, a model that serves decoding) holds its
// weights alone.
type Model struct {
	cfg   Config
	d     dims
	specs []spec
	w     weights
	rope  *ropeTable
	pool  *bufPool // the passes' buffers; shared with another model by ShareBuffers

	gradMu sync.Mutex
	g      weights // zero until gradsNow allocates it
	// narrow holds the weight matrices in bfloat16 when HoldBF16 made
	// the model hold them so (w then keeps the norms and biases alone).
	narrow *narrowWeights
	// checkpoint is the activation-checkpointing choice of Forward (see
	// SetCheckpointing).
	checkpoint bool
	// batchVariant makes Extend multiply a step's rows in one plain
	// product (see SetBatchInvariantDecode).
	batchVariant bool
	// bf16 holds the projections and head packed in bfloat16 for Extend
	// when DecodeBF16 turned it on.
	bf16 *bf16Decode
	// computeBF16 makes the passes' products take bfloat16 operands
	// (SetComputeBF16).
	computeBF16 bool
	// gradsReady is SetGradsReady's function.
	gradsReady func(run int)
	// lora is the attached LoRA adapter (AttachAdapter), nil without one:
	// the base is then frozen.
	lora *adapter
	// shard, when set (ShardWeights), is the feed that holds the
	// weights and takes the gradients; w and g then hold views of the
	// units a pass has in hand alone.
	shard *sharded
}

func newModel(cfg Config) (*Model, error) {
	if _, err := cfg.Arch(); err != nil {
		return nil, fmt.Errorf("model: config: %w", err)
	}
	specs := layout(cfg)
	m := &Model{cfg: cfg, d: dimsOf(cfg), specs: specs, pool: &bufPool{}}
	m.w = newWeights(cfg, specs)
	m.rope = newRopeTable(cfg.Head(), cfg.RopeTheta, cfg.RopeScaling)
	return m, nil
}

// New returns a model with weights drawn from a normal distribution of
// standard deviation 0.02 (seeded), biases zero and norm weights one, as
// Hugging Face initialises these models.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for _, t := range m.Params() {
		switch {
		case strings.HasSuffix(t.Name, "norm.weight"):
			for i := range t.Data {
				t.Data[i] = 1
			}
		case strings.HasSuffix(t.Name, ".bias"):
		default:
			for i := range t.Data {
				t.Data[i] = float32(0.02 * r.NormFloat64())
			}
		}
	}
	return m, nil
}

// FromTensors builds a model from named tensors (a loaded checkpoint). Every
// parameter of cfg must be present with its exact shape; lm_head.weight of a
// tied model and rotary inv_freq buffers are ignored; any other name is an
// error.
func FromTensors(cfg Config, tensors map[string]NamedTensor) (*Model, error) {
	m, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	var missing []string
	var missingShape []int
	for _, t := range m.Params() {
		want[t.Name] = true
		src, ok := tensors[t.Name]
		if !ok {
			if missing == nil {
				missingShape = t.Shape
			}
			missing = append(missing, t.Name)
			continue
		}
		if !sameShape(src.Shape, t.Shape) || len(src.Data) != len(t.Data) {
			return nil, fmt.Errorf("model: tensor %s has shape %v (%d values), config wants %v", t.Name, src.Shape, len(src.Data), t.Shape)
		}
		copy(t.Data, src.Data)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("model: %d tensors missing, first %s (config wants shape %v); is the config the checkpoint's own?", len(missing), missing[0], missingShape)
	}
	var extra []string
	for name := range tensors {
		if want[name] || strings.HasSuffix(name, "rotary_emb.inv_freq") || (cfg.TieWordEmbeddings && name == "lm_head.weight") {
			continue
		}
		extra = append(extra, name)
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("model: %d tensors the config does not use, first %s (a different architecture?)", len(extra), extra[0])
	}
	return m, nil
}

// Loader builds a model from tensors that arrive one at a time (a
// checkpoint decoding straight into the model's storage, so that the
// weights exist once in memory): Dest says where each goes, Model checks
// that every parameter came and returns the model. The rules are
// FromTensors'.
type Loader struct {
	m      *Model
	specs  map[string]spec
	filled map[string]bool
	extra  []string
}

// NewLoader returns a loader for a model of cfg, its weights zero.
func NewLoader(cfg Config) (*Loader, error) {
	m, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	l := &Loader{m: m, specs: map[string]spec{}, filled: map[string]bool{}}
	for _, s := range m.specs {
		l.specs[s.name] = s
	}
	return l, nil
}

// Dest returns the storage of parameter name, which must have shape; nil
// for a tensor the model does not read (rotary inv_freq buffers, a tied
// model's lm_head.weight, and names the config does not use, which Model
// then reports).
func (l *Loader) Dest(name string, shape []int) ([]float32, error) {
	s, ok := l.specs[name]
	if !ok {
		if !strings.HasSuffix(name, "rotary_emb.inv_freq") && !(l.m.cfg.TieWordEmbeddings && name == "lm_head.weight") {
			l.extra = append(l.extra, name)
		}
		return nil, nil
	}
	if !sameShape(shape, s.shape) {
		return nil, fmt.Errorf("model: tensor %s has shape %v, config wants %v", name, shape, s.shape)
	}
	if l.filled[name] {
		return nil, fmt.Errorf("model: tensor %s arrives twice", name)
	}
	l.filled[name] = true
	return l.m.w.flat[s.off : s.off+s.size() : s.off+s.size()], nil
}

// Model returns the model once every parameter was filled, else the error
// FromTensors gives for the missing (or unused) tensors.
func (l *Loader) Model() (*Model, error) {
	var missing []string
	var missingShape []int
	for _, s := range l.m.specs {
		if !l.filled[s.name] {
			if missing == nil {
				missingShape = s.shape
			}
			missing = append(missing, s.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("model: %d tensors missing, first %s (config wants shape %v); is the config the checkpoint's own?", len(missing), missing[0], missingShape)
	}
	if len(l.extra) > 0 {
		sort.Strings(l.extra)
		return nil, fmt.Errorf("model: %d tensors the config does not use, first %s (a different architecture?)", len(l.extra), l.extra[0])
	}
	return l.m, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Config returns the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// Params lists the parameters in storage order; Data aliases the model.
func (m *Model) Params() []NamedTensor {
	m.mustHoldFloat32()
	return m.w.named(m.specs)
}

// mustHoldFloat32 panics on a model held in bfloat16 (HoldBF16), whose
// float32 parameters are gone: asking for them is a programming error.
func (m *Model) mustHoldFloat32() {
	if m.Sharded() {
		panic(errSharded)
	}
	if m.narrow != nil {
		panic(errNarrow)
	}
	if m.decodeOnly() {
		panic(errDecodeOnly)
	}
}

// mustHoldGrads panics on a model whose gradients a feed takes unit by
// unit (ShardWeights, ShardGrads): it holds no whole gradient buffer.
func (m *Model) mustHoldGrads() {
	if m.shard != nil {
		panic(errSharded)
	}
}

// decodeOnly reports whether DecodeBF16Only dropped the float32 weights.
func (m *Model) decodeOnly() bool { return m.bf16 != nil && m.bf16.emb != nil }

// Grads lists the gradients in the same order and shapes as Params
// (allocating them, zero, on the first call).
func (m *Model) Grads() []NamedTensor {
	m.mustHoldFloat32()
	m.mustHoldGrads()
	return m.gradsNow().named(m.specs)
}

// gradsNow returns the gradients, allocating them (zero) on first use.
func (m *Model) gradsNow() *weights {
	m.gradMu.Lock()
	defer m.gradMu.Unlock()
	if m.g.flat == nil {
		m.g = newWeights(m.cfg, m.specs)
	}
	return &m.g
}

// HasGrads reports whether the model's gradients are allocated (a model
// that was never differentiated holds none).
func (m *Model) HasGrads() bool {
	if m.shard != nil {
		return false
	}
	m.gradMu.Lock()
	defer m.gradMu.Unlock()
	return m.g.flat != nil
}

// Spans places the tensors the model computes with in ParamData and
// GradData (other backends view their copies of those buffers the same
// way).
func (m *Model) Spans() Spans { return spansOf(m.cfg, m.specs) }

// SpansOf is Spans of a model of cfg, without building the model.
func SpansOf(cfg Config) Spans { return spansOf(cfg, layout(cfg)) }

// GradRuns cuts GradData into the runs a backward pass finishes one after
// the other: run 0 is the final norm's gradient with an untied head's
// after it, run 1+i is layer L-1-i's (its tensors lie together), run L+1
// the embedding's (with a tied head's). They are disjoint, cover the
// buffer, and are the same for every model of the configuration.
func (m *Model) GradRuns() []Span {
	sp := m.Spans()
	L := len(sp.Layers)
	start := func(l int) int { // where layer l's tensors begin
		if l == L {
			return sp.Norm.Off
		}
		return sp.Layers[l].InNorm.Off
	}
	runs := []Span{{sp.Norm.Off, m.NumParams() - sp.Norm.Off}}
	for l := L - 1; l >= 0; l-- {
		runs = append(runs, Span{start(l), start(l+1) - start(l)})
	}
	return append(runs, Span{0, start(0)})
}

// SetGradsReady has every later Backward call f(i) as soon as run i of
// GradRuns holds all that the pass adds to it, in the order of GradRuns,
// from the pass's own goroutine; nil turns it off. The pass writes no
// run after reporting it, so f may hand it to another goroutine that reads
// it while the pass goes on (a reduction overlapped with the backward
// pass); the caller must not let the next pass start before such readers
// are done.
func (m *Model) SetGradsReady(f func(run int)) { m.gradsReady = f }

// ParamData is every parameter in one flat slice (storage order of Params),
// for optimisers that treat the model as one vector.
func (m *Model) ParamData() []float32 {
	m.mustHoldFloat32()
	return m.w.flat
}

// GradData is every gradient in one flat slice, aligned with ParamData
// (allocated, zero, on the first call).
func (m *Model) GradData() []float32 {
	m.mustHoldFloat32()
	m.mustHoldGrads()
	return m.gradsNow().flat
}

// ZeroGrads sets every gradient to zero (nothing to do while none is
// allocated).
func (m *Model) ZeroGrads() {
	m.gradMu.Lock()
	defer m.gradMu.Unlock()
	clear(m.g.flat)
	if m.lora != nil {
		clear(m.lora.grads)
	}
}

// ReleaseBuffers lets go of everything the model holds beyond its weights:
// its gradients (allocated again, zero, by the next pass that needs them)
// and the pass buffers its pool keeps for reuse (a model that shared its
// pool, ShareBuffers, keeps the pool). Call it between passes, not during
// one.
func (m *Model) ReleaseBuffers() {
	m.gradMu.Lock()
	m.g = weights{}
	if m.shard != nil {
		m.g.layers = make([]layerWeights, m.d.L)
	}
	m.gradMu.Unlock()
	m.pool = &bufPool{}
}

// NumParams is the number of parameters (tied embeddings counted once).
func (m *Model) NumParams() int {
	last := m.specs[len(m.specs)-1]
	return last.off + last.size()
}
