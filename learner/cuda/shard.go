package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/aipo-rl/aipo/learner/model"
)

// A sharded Model (ZeRO stage 3 on the devices, zero3.go) holds no whole
// copy of its weights or gradients on the device: its passes take each
// unit's weights (model.UnitsOf: the embedding's vocabulary blocks, each
// decoder layer, the final norm, an untied head's blocks) from a
// unitFeed just before they read it, and hand each unit's gradient to
// the feed as soon as the backward pass adds nothing more to it, in the
// order of model.UnitPlan, the CPU model's order (model.Model's
// ShardWeights), so that device and host ranks agree on the group's
// collective calls. The embedding and the head are read a vocabulary
// block at a time: the embedding's rows of the block's tokens, and the
// head's logits of the block's columns, whose per-row log-sum-exps and
// entropies are combined across the blocks on the host (float64, in
// block order); the head's backward pass recomputes each block's logits
// and carries their gradient through the block's rows. A tied head's
// weight gradient is made at the end of the pass, block by block with
// the embedding's, as on the CPU.
//
// A sharded Model that multiplies in bfloat16 (use16) reads what the
// whole one reads (UseBF16): its products take the projections and the
// head's blocks in bfloat16, and everything else (the embedding's rows,
// the norms, the biases) in float32 (model.UnitReadsBF16). Its feed gives
// each unit in those two forms only: the unit in bfloat16 where the
// products round it, and its float32 image (the unit's float32 tensors
// laid one after another) where the pass reads some of it in float32.
// The gradients stay float32, in flat order.

// unitBufs is a unit's weights as a feed gives them: f32, the unit in
// float32 (flat order), or with packed its float32 image alone (its
// model.UnitReads' Float32 spans one after another); bf16, the unit in
// bfloat16 (flat order), in the passes that multiply in bfloat16 alone
// and for the units whose products read it.
type unitBufs struct {
	f32    *Buffer
	packed bool
	bf16   *Buffer
}

// unitFeed gives a sharded Model the weights of one unit at a time and
// takes its gradients; the Model calls it from its pass, in the order of
// model.UnitPlan.
type unitFeed interface {
	// use returns unit u's weights (unitBufs: its Len floats in flat
	// order, or in bfloat16 passes its bfloat16 values and float32
	// image); the pass reads them until its next use or end, and never
	// writes them.
	use(u int) (unitBufs, error)
	// newGrad returns a zeroed buffer for unit u's gradient, which the
	// pass writes until gradDone.
	newGrad(u int) (*Buffer, error)
	// gradDone hands over unit u's gradient.
	gradDone(u int, g *Buffer) error
	// end ends the pass: the weights it read last are let go, and a
	// gradient it began but did not hand over (a failed pass) dropped.
	end()
}

// devShard is the state of a sharded Model.
type devShard struct {
	feed   unitFeed
	units  []model.Span
	blocks int // the vocabulary's blocks
	rows   int // the rows of a block (the last holds the rest)
	tied   bool
	using  int      // the unit whose weights are in the model's views, -1 none
	wcur   unitBufs // its weights, as the feed gave them
	grad   int      // the unit whose gradient is in the views, -1 none
	gbuf   *Buffer  // its buffer
	// reads is, for a model that multiplies in bfloat16, what its passes
	// read of each unit (model.UnitReadsBF16); nil in float32.
	reads []model.UnitReads
}

// check is the feed's weights w of unit u checked against what the
// passes read of it.
func (s *devShard) check(u int, w unitBufs) error {
	us := s.units[u]
	if s.reads == nil {
		if w.f32 == nil || w.packed || w.f32.n != us.Len {
			return fmt.Errorf("cuda: the feed did not give unit %d's %d float32 weights", u, us.Len)
		}
		return nil
	}
	rd := s.reads[u]
	want := us.Len
	if w.packed {
		want = rd.Float32Len()
	}
	if rd.Float32Len() > 0 && (w.f32 == nil || w.f32.dt != F32 || w.f32.n != want) {
		return fmt.Errorf("cuda: the feed did not give unit %d's float32 tensors (%d floats)", u, want)
	}
	if rd.BF16 && (w.bf16 == nil || w.bf16.dt != BF16 || w.bf16.n != us.Len) {
		return fmt.Errorf("cuda: the feed did not give unit %d's %d weights in bfloat16", u, us.Len)
	}
	return nil
}

// unit indices, as model.UnitsOf numbers them.
func (s *devShard) emb(b int) int   { return b }
func (s *devShard) layer(l int) int { return s.blocks + l }
func (s *devShard) norm() int       { return len(s.units) - 1 - s.headBlocks() }
func (s *devShard) head(b int) int {
	if s.tied {
		return b
	}
	return s.norm() + 1 + b
}
func (s *devShard) headBlocks() int {
	if s.tied {
		return 0
	}
	return s.blocks
}

// blockRange is the vocabulary rows [lo, hi) of block b.
func (g *Model) blockRange(b int) (lo, hi int) {
	r := g.shard.rows
	return b * r, min(g.V, (b+1)*r)
}

// shardOn makes g a sharded model fed by f: the whole parameters and
// gradients (and the LM head's chunk, and with bfloat16 products the
// parameters' bfloat16 copy) leave the device; a model that multiplies
// in bfloat16 goes on doing so, from the units f gives in bfloat16.
func (g *Model) shardOn(f unitFeed) error {
	units := model.UnitsOf(g.cfg)
	sp := g.spans
	blocks := 0
	for _, u := range units {
		if u.Off < sp.Emb.Off+sp.Emb.Len {
			blocks++
		}
	}
	s := &devShard{feed: f, units: units, blocks: blocks, rows: units[0].Len / g.C, tied: g.cfg.TieWordEmbeddings, using: -1, grad: -1}
	if want := blocks + g.L + 1 + s.headBlocks(); want != len(units) {
		return fmt.Errorf("cuda: the model's %d units are not %d vocabulary blocks, %d layers and the final norm", len(units), blocks, g.L)
	}
	var errs []error
	whole := []*Buffer{g.params, g.grads, g.params16}
	if g.lora != nil {
		// A LoRA Model's params and grads are the adapter's, which stay
		// whole on every rank: the frozen base goes.
		// (Opened without it, newLoRAUnplaced, there is none.)
		if g.base == nil && !g.baseUnplaced() {
			return errors.New("cuda: the LoRA Model holds no whole float32 base to shard (held in bfloat16, or sharded already)")
		}
		whole = []*Buffer{g.base}
		g.owned = slices.DeleteFunc(g.owned, func(b *Buffer) bool { return b == g.base })
		g.base = nil
	}
	for _, b := range whole {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if g.head != nil {
		errs = append(errs, g.head.Free())
	}
	if g.lora == nil {
		g.params, g.grads, g.params16 = nil, nil, nil
	}
	g.head = nil
	g.unplaced, g.from = false, nil
	g.w = gpuWeights{layers: make([]gpuLayer, g.L)}
	g.g = gpuWeights{layers: make([]gpuLayer, g.L)}
	g.w16 = gpuWeights{layers: make([]gpuLayer, g.L)}
	if g.use16 {
		s.reads = model.UnitReadsBF16(g.cfg)
	}
	g.shard = s
	return errors.Join(errs...)
}

// Sharded reports whether the model's weights are fed a unit at a time
// (ZeRO stage 3 on the devices).
func (g *Model) Sharded() bool { return g.shard != nil }

// errShardedWhole is the failure of asking a sharded model for its whole
// weights or gradients.
var errShardedWhole = errors.New("cuda: the model's weights and gradients are sharded over the group's devices (ZeRO stage 3): it holds no whole copy of them")

// setViews points the views (the weights', or with grad the gradients')
// of unit u at w (none: clears them); the gradients are w.f32, in flat
// order. In bfloat16 passes the weights' projections are views of
// w.bf16 (g.w16) and their other tensors of w.f32, the unit or its
// float32 image. A vocabulary block's views are none: the embedding and
// head code read the block's buffers themselves.
func (g *Model) setViews(u int, w unitBufs, grad bool) error {
	s := g.shard
	ws, ws16 := &g.w, &g.w16
	if grad || !g.use16 {
		ws16 = nil // the projections' views are ws's, in float32
	}
	if grad {
		ws = &g.g
	}
	base := s.units[u].Off
	var firstErr error
	slice := func(b *Buffer, lo int, sp model.Span) *Buffer {
		if b == nil || sp.Len == 0 {
			return nil
		}
		v, err := b.Slice(lo, lo+sp.Len)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("cuda: unit %d's tensor at %d+%d: %w", u, sp.Off, sp.Len, err)
		}
		return v
	}
	view := func(sp model.Span) *Buffer { // float32
		lo := sp.Off - base
		if w.packed {
			lo = s.reads[u].Float32Before(sp.Off)
		}
		return slice(w.f32, lo, sp)
	}
	view16 := func(sp model.Span) *Buffer { return slice(w.bf16, sp.Off-base, sp) }
	switch {
	case u == s.norm():
		ws.norm = view(g.spans.Norm)
	case u >= s.blocks && u < s.blocks+g.L:
		l := u - s.blocks
		ls := g.spans.Layers[l]
		ws.layers[l] = gpuLayer{
			inNorm: view(ls.InNorm), postNorm: view(ls.PostNorm), qkvBias: view(ls.QKVBias),
			oBias: view(ls.OBias), qkNorm: view(ls.QKNorm),
		}
		if ws16 == nil {
			lw := &ws.layers[l]
			lw.qkv, lw.o, lw.gateUp, lw.down = view(ls.QKV), view(ls.O), view(ls.GateUp), view(ls.Down)
		} else {
			ws16.layers[l] = gpuLayer{qkv: view16(ls.QKV), o: view16(ls.O), gateUp: view16(ls.GateUp), down: view16(ls.Down)}
		}
	}
	return firstErr
}

// need makes unit u's weights those the ops read (nothing to do for a
// model that holds its weights) and returns them.
func (g *Model) need(u int) (unitBufs, error) {
	s := g.shard
	if s.using == u {
		// The unit the ops read already: model.UnitPlan's one event
		// (and one gather) for all of them.
		return s.wcur, nil
	}
	if s.using >= 0 {
		if err := g.setViews(s.using, unitBufs{}, false); err != nil {
			return unitBufs{}, err
		}
		s.using, s.wcur = -1, unitBufs{}
	}
	w, err := s.feed.use(u)
	if err == nil {
		err = s.check(u, w)
	}
	if err != nil {
		return unitBufs{}, fmt.Errorf("cuda: the weights of unit %d: %w", u, err)
	}
	s.using, s.wcur = u, w
	return w, g.setViews(u, w, false)
}

// gradsFor puts unit u's gradient buffer (zeroed when the pass first
// writes it) in the gradients' views and returns it. A pass writes one
// unit's gradient at a time.
func (g *Model) gradsFor(u int) (*Buffer, error) {
	s := g.shard
	if s.grad == u {
		return s.gbuf, nil
	}
	if s.grad >= 0 {
		return nil, fmt.Errorf("cuda: the pass began unit %d's gradient before handing over unit %d's", u, s.grad)
	}
	b, err := s.feed.newGrad(u)
	if err != nil {
		return nil, fmt.Errorf("cuda: the gradient of unit %d: %w", u, err)
	}
	s.grad, s.gbuf = u, b
	return b, g.setViews(u, unitBufs{f32: b}, true)
}

// gradDone hands unit u's gradient to the feed (a unit the pass did not
// write goes as zeros).
func (g *Model) gradDone(u int) error {
	s := g.shard
	b, err := g.gradsFor(u)
	if err != nil {
		return err
	}
	if err := g.setViews(u, unitBufs{}, true); err != nil {
		return err
	}
	s.grad, s.gbuf = -1, nil
	if err := s.feed.gradDone(u, b); err != nil {
		return fmt.Errorf("cuda: handing over the gradient of unit %d: %w", u, err)
	}
	return nil
}

// endPass ends a pass over a sharded model (see unitFeed.end).
func (g *Model) endPass() {
	s := g.shard
	if s.using >= 0 {
		g.setViews(s.using, unitBufs{}, false)
	}
	if s.grad >= 0 {
		g.setViews(s.grad, unitBufs{}, true)
	}
	s.using, s.wcur, s.grad, s.gbuf = -1, unitBufs{}, -1, nil
	s.feed.end()
}

// unitOf is the unit of weight w of layer l.
func (g *Model) unitOf(l int, w model.Weight) int {
	if w == model.WFinalNorm {
		return g.shard.norm()
	}
	return g.shard.layer(l)
}

// blockTokens is, for vocabulary block b, the positions of the tokens
// that fall in it and their rows within it (tokensIn), and every token's
// row within it or -1 (rel).
func (g *Model) blockTokens(tokens []int32, b int) (pos, tokensIn, rel []int32) {
	lo, hi := g.blockRange(b)
	rel = make([]int32, len(tokens))
	for t, tok := range tokens {
		rel[t] = -1
		if int(tok) >= lo && int(tok) < hi {
			pos = append(pos, int32(t))
			tokensIn = append(tokensIn, tok-int32(lo))
			rel[t] = tok - int32(lo)
		}
	}
	return pos, tokensIn, rel
}

// embedSharded writes the embedding rows of the pass's tokens into x
// block by block: each block's rows gathered, then scattered to their
// positions (into zeros: the same values, -0 aside).
func (o *layerOps) embedSharded(x *Buffer) {
	g := o.g
	o.do(-1, "embedding", func() error {
		if err := x.Zero(); err != nil {
			return err
		}
		for b := range g.shard.blocks {
			w, err := g.need(g.shard.emb(b))
			if err != nil {
				return err
			}
			pos, in, _ := g.blockTokens(o.host, b)
			if len(pos) == 0 {
				continue
			}
			rows, at := o.s.get(F32, len(pos)*g.C), o.s.ints(pos)
			toks := o.s.ints(in)
			if o.s.err != nil {
				return o.s.err
			}
			if err := g.dv.EmbeddingForward(rows, toks, w.f32, g.C); err != nil {
				return err
			}
			if err := g.dv.EmbeddingBackward(x, rows, at, g.C); err != nil {
				return err
			}
		}
		return nil
	})
}

// embedBackSharded adds dx to the embedding's gradient block by block,
// each handed over when done; with a tied head the block's head gradient
// is made first (headWeightGrad).
func (o *layerOps) embedBackSharded(dx *Buffer) {
	g := o.g
	o.do(-1, "embedding backward", func() error {
		for b := range g.shard.blocks {
			u := g.shard.emb(b)
			if g.shard.tied && o.head != nil {
				if err := o.head.weightGrad(b); err != nil {
					return err
				}
			}
			gb, err := g.gradsFor(u)
			if err != nil {
				return err
			}
			_, _, rel := g.blockTokens(o.host, b)
			toks := o.s.ints(rel)
			if o.s.err != nil {
				return o.s.err
			}
			if err := g.dv.EmbeddingBackward(gb, dx, toks, g.C); err != nil {
				return err
			}
			if err := g.gradDone(u); err != nil {
				return err
			}
		}
		return nil
	})
}

// shardHead is the sharded head's state through a pass: the rows with a
// target (xh[M,C]), their global targets on the device and on the host,
// each row's log-sum-exp over the whole vocabulary, and after the loss
// the log-prob gradient.
type shardHead struct {
	g       *Model
	s       *scratch
	xh      *Buffer
	M       int
	targets []int32
	tgt     *Buffer // I32 [M]
	lse     *Buffer // F32 [M]
	gb      *Buffer // F32 [M], after the loss
	chunk   int     // rows per logits chunk
	lg      *Buffer // a chunk of one block's logits, reused by every block
	// x16 is, in bfloat16 passes, the chunk's rows rounded by the last
	// blockLogits (the model's first rounding buffer), which the
	// weight gradient's product reads.
	x16 *Buffer
}

// chunkRows is the rows of a chunk of one block's logits: at most
// DefaultLMHeadChunkBytes of them, and no more than the pass's rows.
func chunkRows(M, cols int) int {
	return max(1, min(M, int(DefaultLMHeadChunkBytes/(4*uint64(cols)))))
}

// blockLogits fills lg with the logits of rows [r0, r0+n) over block b's
// columns, from the block's rows w: in bfloat16 passes the product of
// the rows rounded (x16) and the block's bfloat16 rows, as LMHead's.
func (h *shardHead) blockLogits(lg *Buffer, w unitBufs, b, r0, n int) error {
	g := h.g
	lo, hi := g.blockRange(b)
	x, err := h.xh.Slice(r0*g.C, (r0+n)*g.C)
	if err != nil {
		return err
	}
	if !g.use16 {
		return g.dv.Gemm(false, true, n, hi-lo, g.C, 1, x, g.C, w.f32, g.C, 0, lg, hi-lo)
	}
	if h.x16, err = g.round(0, x); err != nil {
		return err
	}
	return g.dv.GemmBF16(false, true, n, hi-lo, g.C, 1, h.x16, g.C, w.bf16, g.C, 0, lg, hi-lo)
}

// dlogits16 is, in bfloat16 passes, the first n*V of lg (a chunk's
// logits' gradient over a block of V columns) rounded for the backward
// products (the model's second rounding buffer), as LMHead's.
func (h *shardHead) dlogits16(lg *Buffer, n, V int) (*Buffer, error) {
	v, err := lg.Slice(0, n*V)
	if err != nil {
		return nil, err
	}
	return h.g.round(1, v)
}

// forwardSharded is the head's forward pass over the vocabulary's
// blocks: per block and chunk of rows, the logits and each row's
// log-sum-exp and entropy over the block (lmhead_logprob, the target
// column where the block holds it); the blocks' are combined on the host
// into each row's log-probability of its target and entropy, and its
// log-sum-exp, kept on the device for the backward pass.
func (g *Model) forwardSharded(s *scratch, xh *Buffer, targets []int32) (*shardHead, []float32, []float32, error) {
	M := len(targets)
	h := &shardHead{g: g, s: s, xh: xh, M: M, targets: targets, tgt: s.ints(targets), lse: s.get(F32, M), chunk: chunkRows(M, g.shard.rows)}
	h.lg = s.get(F32, h.chunk*g.shard.rows)
	lg := h.lg
	dlp, dlse, dent := s.get(F32, M), s.get(F32, M), s.get(F32, M)
	if s.err != nil {
		return nil, nil, nil, s.err
	}
	k := g.shard.blocks
	lses, ents := make([][]float32, k), make([][]float32, k)
	logp := make([]float32, M)
	owner := make([]int, M) // the block that holds each row's target, -1 none
	for b := range k {
		w, err := g.need(g.shard.head(b))
		if err != nil {
			return nil, nil, nil, err
		}
		lo, hi := g.blockRange(b)
		rel := make([]int32, M)
		for r, t := range targets {
			switch {
			case t < 0 || int(t) >= g.V:
				rel[r] = -1
			case int(t) >= lo && int(t) < hi:
				rel[r] = t - int32(lo)
				owner[r] = b + 1
			default:
				rel[r] = 0 // any column: the block's sums alone are kept
			}
		}
		rt := s.ints(rel)
		if s.err != nil {
			return nil, nil, nil, s.err
		}
		for r0 := 0; r0 < M; r0 += h.chunk {
			n := min(h.chunk, M-r0)
			if err := h.blockLogits(lg, w, b, r0, n); err != nil {
				return nil, nil, nil, err
			}
			v, err := sliceAll(r0, r0+n, dlp, dlse, dent, rt)
			if err != nil {
				return nil, nil, nil, err
			}
			if err := g.dv.launch("lmhead_logprob", uint32(n), blockSize, v[0], v[1], v[2], lg, v[3], n, hi-lo); err != nil {
				return nil, nil, nil, err
			}
		}
		lses[b], ents[b] = make([]float32, M), make([]float32, M)
		bl := make([]float32, M)
		if M == 0 {
			continue
		}
		for _, c := range []struct {
			dst []float32
			src *Buffer
		}{{lses[b], dlse}, {ents[b], dent}, {bl, dlp}} {
			if err := c.src.CopyToFloat32(c.dst); err != nil {
				return nil, nil, nil, err
			}
		}
		for r := range M {
			if owner[r] == b+1 {
				logp[r] = bl[r] + lses[b][r] // the target's logit
			}
		}
	}
	lse, ent := make([]float32, M), make([]float32, M)
	for r, t := range targets {
		if t < 0 || int(t) >= g.V {
			continue
		}
		top := math.Inf(-1)
		for b := range k {
			top = max(top, float64(lses[b][r]))
		}
		var sum float64
		for b := range k {
			sum += math.Exp(float64(lses[b][r]) - top)
		}
		all := top + math.Log(sum)
		var sx float64 // sum over the vocabulary of p*logit
		for b := range k {
			lb := float64(lses[b][r])
			sx += math.Exp(lb-all) * (lb - float64(ents[b][r]))
		}
		lse[r] = float32(all)
		ent[r] = float32(all - sx)
		logp[r] = float32(float64(logp[r]) - all)
	}
	if M > 0 {
		if err := h.lse.CopyFromFloat32(lse); err != nil {
			return nil, nil, nil, err
		}
	}
	return h, logp, ent, nil
}

// blockGrad makes, for rows [r0, r0+n), the logits' gradient over block
// b's columns in lg (recomputed from the block's rows w).
func (h *shardHead) blockGrad(lg *Buffer, w unitBufs, b, r0, n int) error {
	g := h.g
	lo, hi := g.blockRange(b)
	if err := h.blockLogits(lg, w, b, r0, n); err != nil {
		return err
	}
	v, err := sliceAll(r0, r0+n, h.lse, h.tgt, h.gb)
	if err != nil {
		return err
	}
	return g.dv.launch("lmhead_dlogits_cols", uint32(n), blockSize, lg, v[0], v[1], v[2], n, hi-lo, lo)
}

// backwardSharded is the head's backward pass: each block's logits
// recomputed and turned into their gradient, carried into dxh (the
// blocks' products added in block order) and, for an untied head, into
// the block's weight gradient, handed over block by block. In bfloat16
// passes both products take the logits' gradient rounded, with the
// block's bfloat16 rows and the chunk's rows rounded, as LMHead's.
func (h *shardHead) backwardSharded(gradRows []float32, dxh *Buffer) error {
	g, s := h.g, h.s
	h.gb = s.get(F32, h.M)
	lg := h.lg
	if s.err != nil {
		return s.err
	}
	if h.M > 0 {
		if err := h.gb.CopyFromFloat32(gradRows); err != nil {
			return err
		}
	}
	for b := range g.shard.blocks {
		u := g.shard.head(b)
		w, err := g.need(u)
		if err != nil {
			return err
		}
		var gw *Buffer
		if !g.shard.tied && g.lora == nil { // (a LoRA Model's frozen base takes no gradient)
			if gw, err = g.gradsFor(u); err != nil {
				return err
			}
		}
		lo, hi := g.blockRange(b)
		V := hi - lo
		var beta float32
		if b > 0 {
			beta = 1
		}
		for r0 := 0; r0 < h.M; r0 += h.chunk {
			n := min(h.chunk, h.M-r0)
			if err := h.blockGrad(lg, w, b, r0, n); err != nil {
				return err
			}
			dx, err := dxh.Slice(r0*g.C, (r0+n)*g.C)
			if err != nil {
				return err
			}
			gemm, dl, wt := g.dv.Gemm, lg, w.f32
			x, err := h.xh.Slice(r0*g.C, (r0+n)*g.C)
			if err != nil {
				return err
			}
			if g.use16 {
				gemm, wt, x = g.dv.GemmBF16, w.bf16, h.x16
				if dl, err = h.dlogits16(lg, n, V); err != nil {
					return err
				}
			}
			if err := gemm(false, false, n, g.C, V, 1, dl, V, wt, g.C, beta, dx, g.C); err != nil {
				return err
			}
			if gw != nil {
				if err := gemm(true, false, V, g.C, n, 1, dl, V, x, g.C, 1, gw, g.C); err != nil {
					return err
				}
			}
		}
		if gw != nil {
			if err := g.gradDone(u); err != nil {
				return err
			}
		}
	}
	return nil
}

// weightGrad adds a tied head's part of block b's gradient (the block's
// logits' gradient recomputed, times xh) to the embedding's block
// gradient, the block's weights read once more.
func (h *shardHead) weightGrad(b int) error {
	g := h.g
	u := g.shard.emb(b)
	w, err := g.need(u)
	if err != nil {
		return err
	}
	gw, err := g.gradsFor(u)
	if err != nil {
		return err
	}
	lo, hi := g.blockRange(b)
	V := hi - lo
	lg := h.lg
	for r0 := 0; r0 < h.M; r0 += h.chunk {
		n := min(h.chunk, h.M-r0)
		if err := h.blockGrad(lg, w, b, r0, n); err != nil {
			return err
		}
		x, err := h.xh.Slice(r0*g.C, (r0+n)*g.C)
		if err != nil {
			return err
		}
		gemm, dl := g.dv.Gemm, lg
		if g.use16 {
			gemm, x = g.dv.GemmBF16, h.x16
			if dl, err = h.dlogits16(lg, n, V); err != nil {
				return err
			}
		}
		if err := gemm(true, false, V, g.C, n, 1, dl, V, x, g.C, 1, gw, g.C); err != nil {
			return err
		}
	}
	return nil
}
