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
// the passes read together: the embedding's vocabulary blocks (a tied
// head's too), one unit each, then each decoder layer, the final norm,
// and an untied head's vocabulary blocks (unitIndex). A block is
// vocabBlockRows rows of the vocabulary: no pass reads more than one
// block of the embedding or head at a time, so that a 151,936-token
// vocabulary is never gathered, nor its gradient held, whole.
//
// A pass reads one unit at a time, in the order of UnitPlan: while it
// reads unit u no other unit's weights are in its views, so a feed that
// gathers the next unit while the pass computes holds at most two units'
// weights at once. The arithmetic is that of a model holding its whole
// weights: the same ops read the same values (the head's slices of the
// vocabulary never cross a block, whether the model is sharded or not).

// vocabBlockAlign is what a block's floats are a multiple of: the
// optimiser's chunk (optim's chunkSize), so that the chunks that ZeRO's
// ranks own one by one never cross a block's end.
const vocabBlockAlign = 1 << 16

// minVocabBlockRows is the fewest rows of a vocabulary block (a decoder
// layer's weights when they are more): enough rows that a block's
// products run at the GEMM's full rate and a vocabulary of 151,936 tokens
// is some 19 blocks.
const minVocabBlockRows = 8192

// vocabBlockRows is the rows of each vocabulary block of a model of d
// (the last block holds the rest): about one decoder layer's weights, at
// least minVocabBlockRows, a multiple of sliceAlign whose floats are a
// multiple of vocabBlockAlign. A vocabulary of no more rows is one block.
func vocabBlockRows(d dims) int {
	if d.C <= 0 {
		return max(d.V, 1)
	}
	step := vocabBlockAlign / gcd(vocabBlockAlign, d.C)
	step = step / gcd(step, sliceAlign) * sliceAlign // lcm(step, sliceAlign)
	rows := max(minVocabBlockRows, d.QKV+d.QD+3*d.F) // a layer's weights over C
	return (rows + step - 1) / step * step
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// vocabBlocks is the rows of a vocabulary block and how many blocks the
// vocabulary holds.
func vocabBlocks(d dims) (rows, blocks int) {
	rows = vocabBlockRows(d)
	return rows, max(1, (d.V+rows-1)/rows)
}

// unitIndex numbers the units of a model: blocks units for the
// embedding's vocabulary blocks (the tied head's), one a layer, the final
// norm, and with an untied head its blocks.
type unitIndex struct {
	blocks, layers int
	tied           bool
}

func unitsIndex(cfg Config) unitIndex {
	d := dimsOf(cfg)
	_, k := vocabBlocks(d)
	return unitIndex{blocks: k, layers: d.L, tied: cfg.TieWordEmbeddings}
}

func (x unitIndex) emb(b int) int   { return b }
func (x unitIndex) layer(l int) int { return x.blocks + l }
func (x unitIndex) norm() int       { return x.blocks + x.layers }
func (x unitIndex) head(b int) int {
	if x.tied {
		return b
	}
	return x.norm() + 1 + b
}
func (x unitIndex) count() int {
	if x.tied {
		return x.norm() + 1
	}
	return x.norm() + 1 + x.blocks
}

// UnitsOf cuts the flat parameter buffer of a model of cfg into its units,
// in buffer order.
func UnitsOf(cfg Config) []Span {
	sp := SpansOf(cfg)
	d := dimsOf(cfg)
	rows, k := vocabBlocks(d)
	L := len(sp.Layers)
	start := func(l int) int {
		if l == L {
			return sp.Norm.Off
		}
		return sp.Layers[l].InNorm.Off
	}
	blocks := func(s Span) []Span {
		var out []Span
		for b := range k {
			lo := b * rows
			out = append(out, Span{s.Off + lo*d.C, (min(d.V, lo+rows) - lo) * d.C})
		}
		return out
	}
	out := blocks(sp.Emb)
	for l := range L {
		out = append(out, Span{start(l), start(l+1) - start(l)})
	}
	end := int(ParamCount(cfg))
	if !cfg.TieWordEmbeddings {
		end = sp.Head.Off
	}
	out = append(out, Span{sp.Norm.Off, end - sp.Norm.Off})
	if !cfg.TieWordEmbeddings {
		out = append(out, blocks(sp.Head)...)
	}
	return out
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
// differentiated (Score) reads the embedding's blocks, the layers, the
// final norm and the head's blocks; a training pass (Forward, then
// Backward) goes on with the head's backward pass, which reads its
// blocks again (an untied head's gradient handed over block by block),
// the final norm's, then every layer's from the last, handing over each
// unit's gradient as it ends it, and last the embedding's blocks'
// gradients. A tied head's gradient is added to the embedding's, which is
// known at the end of the pass alone: so that no pass holds the whole of
// it, the head's backward pass then makes only its input's gradient, and
// at the end each block is read once more, its head gradient made from
// the logits again (those the pass kept, or recomputed) and the
// embedding's rows added, and handed over. Every pass of a model of cfg
// follows it, so ranks that run passes of the same kinds in the same
// order agree on it without a word.
func UnitPlan(cfg Config, train bool) []UnitEvent { return unitPlan(cfg, train, false) }

// FrozenUnitPlan is the order in which a training pass over a model of
// cfg whose base is frozen (a LoRA adapter attached: AttachAdapter) reads
// its units: as UnitPlan's training pass reads them, up to the last
// layer's backward pass, and handing over no gradient (the base takes
// none; the adapter's gradients stay in the model). The embedding's blocks
// are not read again at the end: a frozen base's head makes no weight
// gradient to add to them.
func FrozenUnitPlan(cfg Config) []UnitEvent { return unitPlan(cfg, true, true) }

func unitPlan(cfg Config, train, frozen bool) []UnitEvent {
	x := unitsIndex(cfg)
	var out []UnitEvent
	cur := -1 // the unit the pass reads
	use := func(u int) {
		if u != cur {
			out = append(out, UnitEvent{Unit: u})
			cur = u
		}
	}
	grad := func(u int) {
		if !frozen {
			out = append(out, UnitEvent{Unit: u, Grad: true})
		}
	}
	for b := range x.blocks {
		use(x.emb(b))
	}
	for l := range x.layers {
		use(x.layer(l))
	}
	use(x.norm())
	for b := range x.blocks {
		use(x.head(b))
	}
	if !train {
		return out
	}
	for b := range x.blocks {
		use(x.head(b))
		if !x.tied {
			grad(x.head(b))
		}
	}
	use(x.norm())
	grad(x.norm())
	for l := x.layers - 1; l >= 0; l-- {
		use(x.layer(l))
		grad(x.layer(l))
	}
	if frozen {
		return out
	}
	for b := range x.blocks {
		if x.tied {
			use(x.emb(b))
		}
		grad(x.emb(b))
	}
	return out
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
//
// A model held in bfloat16 for scoring (HoldBF16, HoldBF16Rounded) may be
// sharded too: the caller takes its values first (UnitValues: the
// bfloat16 values widened, exactly), and its passes then read the
// feed's float32 units, which hold the same values.
func (m *Model) ShardWeights(f UnitFeed) error {
	if m.bf16 != nil {
		return errors.New("model: a model held in bfloat16 for decoding cannot shard its float32 weights")
	}
	if f == nil {
		return errors.New("model: ShardWeights without a feed")
	}
	m.gradMu.Lock()
	m.g = weights{layers: make([]layerWeights, m.d.L)}
	m.gradMu.Unlock()
	m.w, m.narrow = weights{layers: make([]layerWeights, m.d.L)}, nil
	units := m.Units()
	m.shard = &sharded{feed: f, units: units, using: -1, grads: make([][]float32, len(units))}
	return nil
}

// UnitValues writes unit u's weights (Units()[u].Len floats, in the flat
// buffer's order) into dst: from the flat buffer, or, for a model held in
// bfloat16 for scoring, its matrices' bfloat16 values widened (exact) and
// its norms and biases as they are. A sharded model has none to give.
func (m *Model) UnitValues(u int, dst []float32) error {
	units := m.Units()
	if u < 0 || u >= len(units) {
		return fmt.Errorf("model: unit %d of %d", u, len(units))
	}
	us := units[u]
	if len(dst) != us.Len {
		return fmt.Errorf("model: %d floats for unit %d of %d", len(dst), u, us.Len)
	}
	if m.shard != nil && !m.shard.gradsOnly || m.decodeOnly() {
		return errors.New("model: UnitValues of a model that does not hold its weights (sharded, or held for decoding alone)")
	}
	if m.narrow == nil {
		copy(dst, m.w.flat[us.Off:us.Off+us.Len])
		return nil
	}
	var to weights
	to.layers = make([]layerWeights, m.d.L)
	setUnitViews(&to, m.cfg, units, u, dst)
	x, n, C := unitsIndex(m.cfg), m.narrow, m.d.C
	switch {
	case u < x.blocks || u > x.norm():
		b := u
		src := n.emb
		if u > x.norm() {
			b, src = u-x.norm()-1, n.head
		}
		lo, hi := m.blockRange(b)
		widen(dst, src[lo*C:hi*C])
	case u == x.norm():
		copy(to.norm, m.w.norm)
	default:
		l := u - x.blocks
		lw, tw, nl := &m.w.layers[l], &to.layers[l], &n.layers[l]
		for _, f := range [][2][]float32{{tw.inNorm, lw.inNorm}, {tw.postNorm, lw.postNorm}, {tw.qkvBias, lw.qkvBias}, {tw.oBias, lw.oBias}, {tw.qkNorm, lw.qkNorm}} {
			copy(f[0], f[1])
		}
		widen(tw.qkv, nl.qkv)
		widen(tw.o, nl.o)
		widen(tw.gateUp, nl.gateUp)
		widen(tw.down, nl.down)
	}
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

// layerUnit is the unit of decoder layer l.
func (m *Model) layerUnit(l int) int { return unitsIndex(m.cfg).layer(l) }

// unitOf is the unit of weight w of layer l.
func (m *Model) unitOf(l int, w Weight) int {
	x := unitsIndex(m.cfg)
	if w == WFinalNorm {
		return x.norm()
	}
	return x.layer(l)
}

// readsUnits reports whether the model's passes take their weights from
// a feed (ShardWeights).
func (m *Model) readsUnits() bool { return m.shard != nil && !m.shard.gradsOnly }

// blockRange is the vocabulary rows [lo, hi) of block b.
func (m *Model) blockRange(b int) (lo, hi int) {
	rows, _ := vocabBlocks(m.d)
	return b * rows, min(m.d.V, (b+1)*rows)
}

// embRows is the embedding's rows of vocabulary block b, to read (a
// sharded model's feed gives them).
func (m *Model) embRows(b int) []float32 {
	if m.readsUnits() {
		m.need(unitsIndex(m.cfg).emb(b))
		return m.w.emb
	}
	lo, hi := m.blockRange(b)
	return m.w.emb[lo*m.d.C : hi*m.d.C]
}

// headRows is the head's rows of vocabulary block b, to read.
func (m *Model) headRows(b int) []float32 {
	if m.readsUnits() {
		m.need(unitsIndex(m.cfg).head(b))
		return m.w.head
	}
	lo, hi := m.blockRange(b)
	return m.w.head[lo*m.d.C : hi*m.d.C]
}

// embGradRows is the gradient of the embedding's rows of block b, to add
// to (a model whose gradients a feed takes allocates it).
func (m *Model) embGradRows(b int) []float32 {
	if m.shard != nil {
		return m.gradsFor(unitsIndex(m.cfg).emb(b)).emb
	}
	lo, hi := m.blockRange(b)
	return m.gradsNow().emb[lo*m.d.C : hi*m.d.C]
}

// headGradRows is the gradient of the head's rows of block b, to add to.
func (m *Model) headGradRows(b int) []float32 {
	if m.shard != nil {
		return m.gradsFor(unitsIndex(m.cfg).head(b)).head
	}
	lo, hi := m.blockRange(b)
	return m.gradsNow().head[lo*m.d.C : hi*m.d.C]
}

// deferHeadGrad reports whether the head's backward pass leaves the
// head's weight gradient to the end of the pass (a tied head whose
// gradients a feed takes: see UnitPlan; a frozen base's head takes none).
func (m *Model) deferHeadGrad() bool {
	return m.shard != nil && m.cfg.TieWordEmbeddings && !m.frozen()
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

// setUnitViews points the views of unit u in ws at buf (nil: clears them):
// a vocabulary block's views (emb, head) hold that block's rows alone.
func setUnitViews(ws *weights, cfg Config, units []Span, u int, buf []float32) {
	sp := SpansOf(cfg)
	x := unitsIndex(cfg)
	base := units[u].Off
	view := func(s Span) []float32 {
		if buf == nil || s.Len == 0 {
			return nil
		}
		return buf[s.Off-base : s.Off-base+s.Len : s.Off-base+s.Len]
	}
	switch {
	case u < x.blocks:
		ws.emb = buf
		if cfg.TieWordEmbeddings {
			ws.head = buf
		}
	case u == x.norm():
		ws.norm = view(sp.Norm)
	case u > x.norm():
		ws.head = buf
	default:
		ls := sp.Layers[u-x.blocks]
		ws.layers[u-x.blocks] = layerWeights{
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

// embedForward writes the embedding's rows of the pass's tokens into x: a
// sharded model's block by block, each token's row from the block that
// holds it.
func (m *Model) embedForward(x []float32, tokens []int32) {
	C := m.d.C
	if !m.readsUnits() {
		embeddingForward(x, tokens, m.w.emb, C)
		return
	}
	_, k := vocabBlocks(m.d)
	for b := range k {
		w := m.embRows(b)
		lo, hi := m.blockRange(b)
		parallelFor(len(tokens), 256, func(a, z int) {
			for t := a; t < z; t++ {
				if tok := int(tokens[t]); tok >= lo && tok < hi {
					copy(x[t*C:(t+1)*C], w[(tok-lo)*C:])
				}
			}
		})
	}
}

// embeddingBackwardRows is embeddingBackward into dEmb, the gradient of
// the vocabulary rows [lo, hi) alone: the pass's tokens outside them are
// skipped, and each row gets its tokens' rows in the same order.
func embeddingBackwardRows(dEmb, dout []float32, tokens []int32, C, lo, hi int) {
	for t, tok := range tokens {
		if int(tok) < lo || int(tok) >= hi {
			continue
		}
		row := dEmb[(int(tok)-lo)*C : (int(tok)-lo+1)*C]
		addInto(row, row, dout[t*C:(t+1)*C])
	}
}
