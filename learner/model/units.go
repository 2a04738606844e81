package model

import (
	"errors"
	"fmt"
)

// Fully sharded weights (ZeRO stage 3). A model may hold no whole copy of
// its weights or gradients: ShardWeights hands them to a UnitFeed, and
// every later pass takes the weights of one unit at a time from it and
// hands each unit's gradient back to it as soon as the backward pass adds
// nothing more to it. A unit is a run of the flat parameter buffer that
// the passes read together: unit 0 the embedding (with a tied head), unit
// 1+l decoder layer l, unit L+1 the final norm with an untied head. The
// units are GradRuns in the other order: run i is unit L+1-i.
//
// A pass reads one unit at a time, in the order of UnitPlan: while it
// reads unit u no other unit's weights are in its views, so a feed that
// gathers the next unit while the pass computes holds at most two units'
// weights at once. The arithmetic is that of a model holding its whole
// weights: the same ops read the same values.

// UnitsOf cuts the flat parameter buffer of a model of cfg into its units,
// in buffer order.
func UnitsOf(cfg Config) []Span {
	sp := SpansOf(cfg)
	L := len(sp.Layers)
	start := func(l int) int {
		if l == L {
			return sp.Norm.Off
		}
		return sp.Layers[l].InNorm.Off
	}
	out := []Span{{0, start(0)}}
	for l := range L {
		out = append(out, Span{start(l), start(l+1) - start(l)})
	}
	return append(out, Span{sp.Norm.Off, int(ParamCount(cfg)) - sp.Norm.Off})
}

// Units is UnitsOf the model's configuration.
func (m *Model) Units() []Span { return UnitsOf(m.cfg) }

// UnitEvent is one step of a pass over a sharded model: the pass begins
// to read unit Unit's weights (and stops reading the unit it read
// before), or, with Grad, hands over unit Unit's gradient.
type UnitEvent struct {
	Unit int
	Grad bool
}

// UnitPlan is the order in which a pass over a model of cfg reads its
// units and hands over their gradients: a pass that is not
// differentiated (Score) reads the embedding, the layers, the final norm
// and the head; a training pass (Forward, then Backward) goes on with
// the head's and the final norm's backward pass, then every layer's from
// the last, and hands over each unit's gradient as it ends it (the
// embedding's last: the tied head's gradient is added to it first). Every
// pass of a model of cfg follows it, so ranks that run passes of the same
// kinds in the same order agree on it without a word.
func UnitPlan(cfg Config, train bool) []UnitEvent {
	L := cfg.NumHiddenLayers
	head := L + 1
	if cfg.TieWordEmbeddings {
		head = 0
	}
	var out []UnitEvent
	cur := -1 // the unit the pass reads
	use := func(u int) {
		if u != cur {
			out = append(out, UnitEvent{Unit: u})
			cur = u
		}
	}
	for u := 0; u <= L+1; u++ {
		use(u)
	}
	use(head)
	if !train {
		return out
	}
	use(L + 1)
	out = append(out, UnitEvent{Unit: L + 1, Grad: true})
	for l := L - 1; l >= 0; l-- {
		use(l + 1)
		out = append(out, UnitEvent{Unit: l + 1, Grad: true})
	}
	return append(out, UnitEvent{Unit: 0, Grad: true})
}

// UnitFeed gives a sharded model's passes their weights a unit at a time
// and takes their gradients (see ShardWeights). The model calls it from
// the pass's goroutine, in the order of UnitPlan.
type UnitFeed interface {
	// Use returns unit u's weights (Units()[u].Len floats), once they
	// are there; the pass reads them until its next Use or the end of
	// the pass (EndShardedPass), and never writes them.
	Use(u int) ([]float32, error)
	// NewGrad returns a zeroed buffer for unit u's gradient
	// (Units()[u].Len floats), which the pass writes until GradDone.
	NewGrad(u int) []float32
	// GradDone hands over unit u's gradient (Units()[u].Len floats): the
	// pass writes it no more, and the feed owns it from then on.
	GradDone(u int, g []float32) error
}

// sharded is the state of a model whose weights (or gradients alone) a
// UnitFeed holds.
type sharded struct {
	feed UnitFeed
	// gradsOnly: the model holds its whole weights; the feed takes the
	// gradients alone (ShardGrads).
	gradsOnly bool
	units     []Span
	using     int         // the unit whose weights are in w's views, -1 none
	grads     [][]float32 // the gradient of each unit the pass has begun, nil for others
}

// errSharded is the failure of asking a sharded model for its whole
// weights or gradients.
var errSharded = errors.New("model: the model's weights or gradients are sharded (ShardWeights, ShardGrads): it holds no whole copy of them")

// feedFailure carries a UnitFeed's error out of the ops of a pass (which
// return none) to the pass's entry point.
type feedFailure struct{ err error }

// ShardWeights makes the model hold none of its weights or gradients:
// the flat buffers go, and every later pass takes each unit's weights from
// f and hands each unit's gradient to f. The caller has taken from
// ParamData what it keeps before the call. Activation checkpointing and
// the decoding paths are unaffected; a model held in bfloat16 or for
// decoding alone cannot be sharded.
func (m *Model) ShardWeights(f UnitFeed) error {
	if m.narrow != nil || m.bf16 != nil {
		return errors.New("model: a model held in bfloat16 cannot shard its float32 weights")
	}
	if f == nil {
		return errors.New("model: ShardWeights without a feed")
	}
	m.gradMu.Lock()
	m.g = weights{layers: make([]layerWeights, m.d.L)}
	m.gradMu.Unlock()
	m.w = weights{layers: make([]layerWeights, m.d.L)}
	units := m.Units()
	m.shard = &sharded{feed: f, units: units, using: -1, grads: make([][]float32, len(units))}
	return nil
}

// ShardGrads makes the model hand each unit's gradient to f as
// ShardWeights does, while it holds its whole weights: no pass holds a
// whole gradient buffer (ZeRO stage 2). The gradient buffer goes.
func (m *Model) ShardGrads(f UnitFeed) error {
	if f == nil {
		return errors.New("model: ShardGrads without a feed")
	}
	if m.shard != nil {
		return errors.New("model: ShardGrads of a model whose weights or gradients are sharded already")
	}
	m.gradMu.Lock()
	m.g = weights{layers: make([]layerWeights, m.d.L)}
	m.gradMu.Unlock()
	units := m.Units()
	m.shard = &sharded{feed: f, gradsOnly: true, units: units, using: -1, grads: make([][]float32, len(units))}
	return nil
}

// Sharded reports whether ShardWeights made the model's weights sharded
// (a model whose gradients alone are, ShardGrads, holds its weights).
func (m *Model) Sharded() bool { return m.shard != nil && !m.shard.gradsOnly }

// EndShardedPass ends a pass over a sharded model: the weights of the unit
// it read last leave its views (the feed may free them), and a gradient
// the pass began but did not hand over (a pass that failed) is dropped.
func (m *Model) EndShardedPass() {
	s := m.shard
	if s == nil {
		return
	}
	if s.using >= 0 {
		setUnitViews(&m.w, m.cfg, s.units, s.using, nil)
		s.using = -1
	}
	for u, g := range s.grads {
		if g != nil {
			setUnitViews(&m.g, m.cfg, s.units, u, nil)
			s.grads[u] = nil
		}
	}
}

// need puts unit u's weights in the model's views for the ops that follow
// (nothing to do for a model that holds its weights).
func (m *Model) need(u int) {
	s := m.shard
	if s == nil || s.gradsOnly || s.using == u {
		return
	}
	if s.using >= 0 {
		setUnitViews(&m.w, m.cfg, s.units, s.using, nil)
		s.using = -1
	}
	w, err := s.feed.Use(u)
	if err == nil && len(w) != s.units[u].Len {
		err = fmt.Errorf("model: the feed gave %d weights for unit %d of %d", len(w), u, s.units[u].Len)
	}
	if err != nil {
		panic(feedFailure{fmt.Errorf("model: the weights of unit %d: %w", u, err)})
	}
	setUnitViews(&m.w, m.cfg, s.units, u, w)
	s.using = u
}

// gradsFor is the gradients with unit u's in their views: the whole
// buffer of a model that holds its weights, or the unit's own buffer,
// allocated zero when the pass first writes it.
func (m *Model) gradsFor(u int) *weights {
	s := m.shard
	if s == nil {
		return m.gradsNow()
	}
	if s.grads[u] == nil {
		s.grads[u] = s.feed.NewGrad(u)
		if len(s.grads[u]) != s.units[u].Len {
			panic(feedFailure{fmt.Errorf("model: the feed gave a gradient buffer of %d floats for unit %d of %d", len(s.grads[u]), u, s.units[u].Len)})
		}
		setUnitViews(&m.g, m.cfg, s.units, u, s.grads[u])
	}
	return &m.g
}

// gradDone hands unit u's gradient to the feed (a unit the pass did not
// write is handed over as zeros).
func (m *Model) gradDone(u int) {
	s := m.shard
	m.gradsFor(u)
	buf := s.grads[u]
	setUnitViews(&m.g, m.cfg, s.units, u, nil)
	s.grads[u] = nil
	if err := s.feed.GradDone(u, buf); err != nil {
		panic(feedFailure{fmt.Errorf("model: handing over the gradient of unit %d: %w", u, err)})
	}
}

// headUnit is the unit that holds the LM head.
func (m *Model) headUnit() int {
	if m.cfg.TieWordEmbeddings {
		return 0
	}
	return m.d.L + 1
}

// unitOf is the unit of weight w of layer l.
func (m *Model) unitOf(l int, w Weight) int {
	if w == WFinalNorm {
		return m.d.L + 1
	}
	return l + 1
}

// recoverFeed turns a feed's failure inside a pass into the pass's error.
func recoverFeed(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(feedFailure)
		if !ok {
			panic(r)
		}
		*err = f.err
	}
}

// setUnitViews points the views of unit u in ws at buf (nil: clears them).
func setUnitViews(ws *weights, cfg Config, units []Span, u int, buf []float32) {
	sp := SpansOf(cfg)
	base := units[u].Off
	view := func(s Span) []float32 {
		if buf == nil || s.Len == 0 {
			return nil
		}
		return buf[s.Off-base : s.Off-base+s.Len : s.Off-base+s.Len]
	}
	L := len(sp.Layers)
	switch {
	case u == 0:
		ws.emb = view(sp.Emb)
		if cfg.TieWordEmbeddings {
			ws.head = ws.emb
		}
	case u == L+1:
		ws.norm = view(sp.Norm)
		if !cfg.TieWordEmbeddings {
			ws.head = view(sp.Head)
		}
	default:
		ls := sp.Layers[u-1]
		ws.layers[u-1] = layerWeights{
			inNorm: view(ls.InNorm), postNorm: view(ls.PostNorm), qkv: view(ls.QKV), qkvBias: view(ls.QKVBias),
			o: view(ls.O), oBias: view(ls.OBias), gateUp: view(ls.GateUp), down: view(ls.Down), qkNorm: view(ls.QKNorm),
		}
	}
}

// UnshardWeights makes a sharded model hold its whole weights again:
// flat (every parameter, in storage order) becomes its parameter buffer,
// which it then owns, and passes read it as a model's that was never
// sharded. Call it between passes.
func (m *Model) UnshardWeights(flat []float32) error {
	if !m.Sharded() {
		return errors.New("model: UnshardWeights of a model whose weights are not sharded")
	}
	if len(flat) != m.NumParams() {
		return fmt.Errorf("model: %d weights for a model of %d", len(flat), m.NumParams())
	}
	m.shard = nil
	m.w = viewWeights(m.cfg, m.specs, flat)
	m.gradMu.Lock()
	m.g = weights{}
	m.gradMu.Unlock()
	return nil
}
