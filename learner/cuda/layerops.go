package cuda

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// layerOps are the model.LayerOps of a Model for one pass: the CUDA
// kernels over device buffers, in the order learner/model's sequence
// (model.ForwardLayers, model.BackwardLayers) gives them. The first error
// sticks: later ops do nothing and the pass returns it. The buffers they
// take beyond the sequence's are counted by memOps (memory.go), which
// takes them where these ops do.
type layerOps struct {
	g                         *Model
	s                         *scratch
	N                         int
	tokens, pos, gStart, gEnd *Buffer
	delta                     *Buffer   // attention backward scratch [N*H]
	qkPartial                 *Buffer   // the q/k norm's weight-gradient scratch
	lora                      *loraPass // the adapter's products (lora.go); nil without an adapter on
	err                       error

	// A sharded model's (shard.go): the pass's tokens on the host, and
	// the head's state for a tied head's deferred weight gradient.
	host []int32
	head *shardHead
}

// unit makes the weights of layer l's weight w those the ops read, when
// the model is sharded (nothing to do otherwise).
func (o *layerOps) unit(l int, w model.Weight) {
	if o.g.shard == nil || o.err != nil {
		return
	}
	if _, err := o.g.need(o.g.unitOf(l, w)); err != nil {
		o.err = err
	}
}

// unitGrad is unit with the unit's gradient in the views too (a LoRA
// Model's frozen base has none: its weights alone).
func (o *layerOps) unitGrad(l int, w model.Weight) {
	o.unit(l, w)
	if o.g.shard == nil || o.g.lora != nil || o.err != nil {
		return
	}
	if _, err := o.g.gradsFor(o.g.unitOf(l, w)); err != nil {
		o.err = err
	}
}

var _ model.LayerOps[*Buffer] = (*layerOps)(nil)

// do runs f unless an op failed; what fails is named by layer (-1: none)
// and step.
func (o *layerOps) do(l int, step string, f func() error) {
	if o.err != nil {
		return
	}
	if o.s.err != nil {
		o.err = o.s.err
		return
	}
	if err := f(); err != nil {
		if l >= 0 && l < o.g.L {
			o.err = fmt.Errorf("cuda: layer %d %s: %w", l, step, err)
		} else {
			o.err = fmt.Errorf("cuda: %s: %w", step, err)
		}
	}
}

// norm is norm w of layer l (model.WFinalNorm: the final norm) in ws: the
// weights, or the gradients in a backward pass (a decoder has none).
func (o *layerOps) norm(ws *gpuWeights, l int, w model.Weight) *Buffer {
	switch w {
	case model.WInNorm:
		return ws.layers[l].inNorm
	case model.WPostNorm:
		return ws.layers[l].postNorm
	case model.WFinalNorm:
		return ws.norm
	}
	panic("cuda: a norm op was given a weight that is not a norm")
}

// linear is projection w of layer l in ws, its bias, and its shape [O, I].
func (o *layerOps) linear(ws *gpuWeights, l int, w model.Weight) (wt, b *Buffer, I, O int) {
	g, lw := o.g, &ws.layers[l]
	switch w {
	case model.WQKV:
		return lw.qkv, lw.qkvBias, g.C, g.QKV
	case model.WO:
		return lw.o, lw.oBias, g.QD, g.C
	case model.WGateUp:
		return lw.gateUp, nil, g.C, 2 * g.F
	case model.WDown:
		return lw.down, nil, g.F, g.C
	}
	panic("cuda: a linear op was given a weight that is not a projection")
}

// Storing, Store and Load implement model.InputStore: with
// Model.SetInputStore, a checkpointed pass stores each layer's input in
// host memory (Model.stored, kept from pass to pass at the largest size
// a pass needed).
func (o *layerOps) Storing() bool { return o.g.storeInputs && o.g.checkpoint }

func (o *layerOps) Store(l int, x *Buffer) {
	if o.err != nil || o.s.err != nil {
		return
	}
	g := o.g
	for len(g.stored) <= l {
		g.stored = append(g.stored, nil)
	}
	if cap(g.stored[l]) < x.Len() {
		g.stored[l] = make([]float32, x.Len())
	}
	g.stored[l] = g.stored[l][:x.Len()]
	if err := x.CopyToFloat32(g.stored[l]); err != nil {
		o.err = fmt.Errorf("cuda: storing layer %d's input in host memory: %w", l, err)
	}
}

func (o *layerOps) Load(l int, x *Buffer) {
	if o.err != nil || o.s.err != nil {
		return
	}
	if l >= len(o.g.stored) || len(o.g.stored[l]) != x.Len() {
		o.err = fmt.Errorf("cuda: layer %d's input was not stored by this pass's forward pass", l)
		return
	}
	if err := x.CopyFromFloat32(o.g.stored[l]); err != nil {
		o.err = fmt.Errorf("cuda: loading layer %d's input from host memory: %w", l, err)
	}
}

func (o *layerOps) Get(n int) *Buffer    { return o.s.get(F32, n) }
func (o *layerOps) Zeroed(n int) *Buffer { return o.s.zeroed(n) }

func (o *layerOps) Embed(x *Buffer) {
	if o.g.shard != nil {
		o.embedSharded(x)
		return
	}
	o.do(-1, "embedding", func() error { return o.g.dv.EmbeddingForward(x, o.tokens, o.g.w.emb, o.g.C) })
}

func (o *layerOps) Norm(out, rstd, x *Buffer, l int, w model.Weight) {
	o.unit(l, w)
	wt := o.norm(&o.g.w, l, w)
	o.do(l, "forward", func() error { return o.g.dv.RMSNormForward(out, rstd, x, wt, o.N, o.g.C, o.g.cfg.RMSNormEps) })
}

// ResidualNorm is the residual kernel, then the norm kernel.
func (o *layerOps) ResidualNorm(sum, out, rstd, a, b *Buffer, l int, w model.Weight) {
	o.unit(l, w)
	wt := o.norm(&o.g.w, l, w)
	step := "forward"
	if w == model.WInNorm {
		l, step = l-1, "forward (residual into the next layer)"
	}
	o.do(l, step, func() error {
		if err := o.g.dv.ResidualForward(sum, a, b); err != nil {
			return err
		}
		return o.g.dv.RMSNormForward(out, rstd, sum, wt, o.N, o.g.C, o.g.cfg.RMSNormEps)
	})
}

func (o *layerOps) Linear(out, in *Buffer, l int, w model.Weight, bias bool) {
	o.unit(l, w)
	wt, b, I, O := o.linear(&o.g.w, l, w)
	w16 := o.half(l, w)
	if !bias {
		b = nil
	}
	o.do(l, "forward", func() error { return o.g.linear(out, in, wt, w16, b, o.N, I, O) })
	o.adapterForward(out, in, l, w, O)
}

// half is the bfloat16 copy of projection w of layer l, nil when the
// model multiplies in float32.
func (o *layerOps) half(l int, w model.Weight) *Buffer {
	if !o.g.use16 {
		return nil
	}
	w16, _, _, _ := o.linear(&o.g.w16, l, w)
	return w16
}

// QKNorm runs the q/k norm kernel when layer l has one (Qwen3), keeping
// its input and rstd in raw and rstd when the pass has a backward pass.
func (o *layerOps) QKNorm(qkv, raw, rstd *Buffer, l int) {
	o.unit(l, model.WQKV)
	g := o.g
	w := g.w.layers[l].qkNorm
	if w == nil {
		return
	}
	o.do(l, "forward", func() error {
		return g.dv.QKNormForward(qkv, raw, rstd, w, o.N, g.QKV, g.H, g.KV, g.D, g.cfg.RMSNormEps)
	})
}

// RoPE adds the QKV bias (the bias kernel after the projection's GEMM, as
// linear does), then rotates.
func (o *layerOps) RoPE(qkv *Buffer, l int) {
	o.unit(l, model.WQKV)
	g, b := o.g, o.g.w.layers[l].qkvBias
	o.do(l, "forward", func() error {
		if b != nil {
			if err := g.dv.BiasAdd(qkv, b, o.N, g.QKV); err != nil {
				return err
			}
		}
		return g.dv.RoPEForward(qkv, g.QKV, o.pos, g.H+g.KV, g.D, g.cos, g.sin)
	})
}

func (o *layerOps) Attention(y, lse, qkv *Buffer, l int) {
	g := o.g
	o.do(l, "forward", func() error { return g.dv.AttentionForward(y, lse, qkv, o.gStart, o.N, g.H, g.KV, g.D) })
}

func (o *layerOps) SwiGLU(h, sig, gu *Buffer) {
	o.do(-1, "forward", func() error { return o.g.dv.SwiGLUForward(h, sig, gu, o.N, o.g.F) })
}

// KeepHidden keeps h: device memory holds it.
func (o *layerOps) KeepHidden(h *Buffer) *Buffer { return h }

func (o *layerOps) NormBack(dx, dout, x, rstd *Buffer, l int, w model.Weight) {
	o.unitGrad(l, w)
	wt := o.norm(&o.g.w, l, w)
	var gw *Buffer // nil: a LoRA Model's frozen base takes no gradient
	if !o.g.HasAdapter() {
		gw = o.norm(&o.g.g, l, w)
	}
	o.do(l, "backward", func() error { return o.g.dv.RMSNormBackward(dx, gw, dout, x, wt, rstd, o.N, o.g.C) })
}

func (o *layerOps) LinearBack(din, dout, in *Buffer, l int, w model.Weight, bias bool) {
	if o.g.HasAdapter() {
		o.loraLinearBack(din, dout, in, l, w)
		return
	}
	o.unitGrad(l, w)
	wt, _, I, O := o.linear(&o.g.w, l, w)
	gw, gb, _, _ := o.linear(&o.g.g, l, w)
	w16 := o.half(l, w)
	if !bias {
		gb = nil
	}
	o.do(l, "backward", func() error { return o.g.linearBack(din, gw, gb, dout, in, wt, w16, o.N, I, O) })
}

func (o *layerOps) Hidden(la *model.LayerActs[*Buffer]) *Buffer { return la.H }

func (o *layerOps) SwiGLUBack(dgu, dh, sig, gu *Buffer) {
	o.do(-1, "backward", func() error { return o.g.dv.SwiGLUBackward(dgu, dh, sig, gu, o.N, o.g.F) })
}

func (o *layerOps) AttentionBack(dqkv, dy *Buffer, la *model.LayerActs[*Buffer], l int) {
	g := o.g
	if o.delta == nil {
		o.delta = o.s.get(F32, o.N*g.H)
	}
	o.do(l, "backward", func() error {
		return g.dv.AttentionBackward(dqkv, dy, la.QKV, la.Y, la.LSE, o.gStart, o.gEnd, o.delta, o.N, g.H, g.KV, g.D)
	})
}

func (o *layerOps) RoPEBack(dqkv *Buffer) {
	g := o.g
	o.do(-1, "backward", func() error { return g.dv.RoPEBackward(dqkv, g.QKV, o.pos, g.H+g.KV, g.D, g.cos, g.sin) })
}

// QKNormBack runs the q/k norm's backward kernels when layer l has one,
// adding to q_norm's and k_norm's gradients.
func (o *layerOps) QKNormBack(dqkv, raw, rstd *Buffer, l int) {
	o.unitGrad(l, model.WQKV)
	g := o.g
	w := g.w.layers[l].qkNorm
	if w == nil {
		return
	}
	var gw *Buffer // nil: a LoRA Model's frozen base takes no gradient
	if !g.HasAdapter() {
		gw = g.g.layers[l].qkNorm
		if o.qkPartial == nil {
			o.qkPartial = o.s.get(F32, qkNormPartials(o.N, g.D))
		}
	}
	o.do(l, "backward", func() error {
		return g.dv.QKNormBackward(dqkv, gw, raw, rstd, w, o.qkPartial, o.N, g.QKV, g.H, g.KV, g.D)
	})
}

func (o *layerOps) EmbedBack(dx *Buffer) {
	if o.g.HasAdapter() {
		return // a LoRA Model's frozen base takes no gradient
	}
	if o.g.shard != nil {
		o.embedBackSharded(dx)
		return
	}
	o.do(-1, "embedding backward", func() error { return o.g.dv.EmbeddingBackward(o.g.g.emb, dx, o.tokens, o.g.C) })
}

// GradsDone does nothing for a model that holds its gradients: they are
// reduced, when they are, after the backward pass (the CPU model hands
// each layer's on as it finishes it, Model.SetGradsReady). A sharded
// model hands the final norm's (l = L) or layer l's gradient to its feed
// (the embedding's blocks went in EmbedBack); a sharded LoRA Model's
// frozen base hands over none (model.FrozenUnitPlan).
func (o *layerOps) GradsDone(l int) {
	if o.g.shard == nil || o.g.lora != nil || l < 0 {
		return
	}
	u := o.g.shard.layer(l)
	if l == o.g.L {
		u = o.g.shard.norm()
	}
	o.do(l, "handing over the gradient", func() error { return o.g.gradDone(u) })
}
