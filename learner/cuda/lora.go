package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
)

// LoRA on the device. A Model made by NewLoRA trains the host model's
// attached adapter (model.AttachAdapter) on its frozen base, with the
// arithmetic of the CPU's layer ops (learner/model's lora.go) in the same
// order: each targeted projection computes
//
//	y = x Wᵀ + s · (drop(x) Aᵀ) Bᵀ
//
// as the base's product (float32, or bfloat16 operands where the base is
// held in bfloat16) followed by two float32 cuBLAS GEMMs of the adapter's,
// and its backward pass computes the base's input gradient alone, then
// the adapter's gradients and its share of the input's gradient.
//
// The base is uploaded as NewFrozen uploads a reference model: its weights
// alone, no gradient buffer for any of them, in bfloat16 (projections and
// head) when the run computes in bf16. The Model's params and grads are
// the adapter's flat buffers (model.AdapterParamData's layout), so that
// Step, the optimiser state on disk, the host-reduced data-parallel group
// and the device group (dpgroup.go) move and step the adapter alone with
// the code that moves and steps a whole model.
//
// The passes read the host model's adapter switch (SetAdapterOn: off, the
// base alone, the KL term's reference) and dropout step (SetAdapterStep)
// at their start. The dropout masks are drawn on the device by the
// lora_dropout kernels from the CPU's keys (model.DropoutRowKeys, hashed
// on the host once a pass, 8 bytes a row; model.DropoutModuleKey), with
// the CPU's hash: the same bits as the CPU's masks without moving a mask
// of N × features per module across the bus, as computing them on the
// host would.

// gpuAdapter is a LoRA Model's adapter.
type gpuAdapter struct {
	host  *model.Model // the policy whose adapter this is
	r     int
	scale float32
	maxIn int          // the widest module input
	mods  [][]*gpuLoRA // [layer][index in peft.Targets], nil where not targeted
}

// gpuLoRA is one adapted projection: A [r, in] and B [out, r] and their
// gradients, views of the Model's params and grads; it adds into columns
// [col, col+out) of projection w's output.
type gpuLoRA struct {
	layer, target int
	w             model.Weight
	in, out, col  int
	A, B, gA, gB  *Buffer
}

// NewLoRA uploads m, which must have a LoRA adapter attached, for
// training the adapter alone: the base's weights as NewFrozen holds them
// (with bf16 its projections and head in bfloat16 only), the adapter's
// matrices and their zeroed gradients in float32.
func (dv *Device) NewLoRA(m *model.Model, bf16 bool) (*Model, error) {
	if !m.HasAdapter() {
		return nil, fmt.Errorf("cuda: NewLoRA: the model has no LoRA adapter attached")
	}
	g, err := dv.NewFrozen(m, bf16)
	if err != nil {
		return nil, err
	}
	if err := g.attachAdapter(m); err != nil {
		g.Free()
		return nil, fmt.Errorf("cuda: NewLoRA: %w", err)
	}
	return g, nil
}

// newLoRAUnplaced is NewLoRA for a LoRA policy whose frozen base ZeRO
// stage 3 on the devices shards (backend.BaseSharded): the adapter's
// matrices, their zeroed gradients and the rotary table are uploaded,
// and nothing of the base, whose rank's share ShardBase uploads from m's
// weights a unit's run at a time, so that no device ever holds the whole
// base. Until then the passes refuse to run (errUnplaced); the adapter's
// parameters, gradients and optimiser state can be read and written.
func (dv *Device) newLoRAUnplaced(m *model.Model) (*Model, error) {
	if !m.HasAdapter() {
		return nil, fmt.Errorf("cuda: newLoRAUnplaced: the model has no LoRA adapter attached")
	}
	g, err := dv.shell(m.Config())
	if err != nil {
		return nil, err
	}
	g.spans, g.from = m.Spans(), m
	if err := g.ropeTable(); err != nil {
		g.Free()
		return nil, err
	}
	if err := g.attachAdapter(m); err != nil {
		g.Free()
		return nil, fmt.Errorf("cuda: the LoRA policy's passes: %w", err)
	}
	return g, nil
}

// baseUnplaced reports whether g is a LoRA Model opened without its base
// (newLoRAUnplaced) whose share ShardBase has not placed yet.
func (g *Model) baseUnplaced() bool { return g.lora != nil && g.from != nil }

// attachAdapter uploads m's adapter as the Model's parameters (the frozen
// base's float32 buffer, when it has one, becomes an owned buffer).
func (g *Model) attachAdapter(m *model.Model) error {
	if g.params != nil {
		g.owned = append(g.owned, g.params)
		g.base, g.params = g.params, nil
	}
	ad := m.Adapter()
	var err error
	if g.params, err = g.dv.Upload(m.AdapterParamData()); err != nil {
		return fmt.Errorf("the adapter's matrices: %w", err)
	}
	if g.grads, err = g.dv.Alloc(F32, g.params.n); err != nil {
		return fmt.Errorf("the adapter's gradients: %w", err)
	}
	if err := g.grads.Zero(); err != nil {
		return err
	}
	a := &gpuAdapter{host: m, r: ad.Config.R, scale: ad.Config.Scale(), mods: make([][]*gpuLoRA, g.L)}
	for l := range a.mods {
		a.mods[l] = make([]*gpuLoRA, len(peft.Targets))
	}
	off := 0
	for _, pm := range ad.Modules {
		t := slices.Index(peft.Targets, pm.Target)
		if t < 0 || pm.Layer < 0 || pm.Layer >= g.L {
			return fmt.Errorf("the adapter's module %s is not a projection of this model", pm.Base())
		}
		w, col := g.loraTarget(pm.Target)
		lm := &gpuLoRA{layer: pm.Layer, target: t, w: w, in: pm.In, out: pm.Out, col: col}
		na, nb := a.r*pm.In, pm.Out*a.r
		views, err := sliceAll(off, off+na, g.params, g.grads)
		if err != nil {
			return err
		}
		lm.A, lm.gA = views[0], views[1]
		if views, err = sliceAll(off+na, off+na+nb, g.params, g.grads); err != nil {
			return err
		}
		lm.B, lm.gB = views[0], views[1]
		off += na + nb
		a.mods[pm.Layer][t] = lm
		a.maxIn = max(a.maxIn, pm.In)
	}
	if off != g.params.n {
		return fmt.Errorf("the adapter's modules hold %d values, its matrices %d", off, g.params.n)
	}
	g.lora = a
	return nil
}

// loraTarget is the stacked projection the module called target belongs
// to and its first output column in it (learner/model's targetWeight).
func (g *Model) loraTarget(target string) (model.Weight, int) {
	switch target {
	case "q_proj":
		return model.WQKV, 0
	case "k_proj":
		return model.WQKV, g.QD
	case "v_proj":
		return model.WQKV, g.QD + g.KD
	case "o_proj":
		return model.WO, 0
	case "gate_proj":
		return model.WGateUp, 0
	case "up_proj":
		return model.WGateUp, g.F
	}
	return model.WDown, 0
}

// HasAdapter reports whether the Model trains a LoRA adapter (NewLoRA).
func (g *Model) HasAdapter() bool { return g.lora != nil }

// loraPass is what one pass's adapter products share: the rows' dropout
// keys on the device (nil: no dropout in this pass) and scratch for
// drop(x) and the rank-r products, reused module after module (the ops
// run in order on one stream).
type loraPass struct {
	a          *gpuAdapter
	keys       *Buffer // I32 [2N]: the rows' uint64 keys
	seed, step uint64
	thr        uint64
	inv        float32
	x, u, du   *Buffer
}

// startLoRA readies o's adapter products for a pass over lay (train: a
// pass to be differentiated, where the dropout applies, as the CPU's
// Forward and not its Score): nothing when the Model has no adapter or
// the host model has it switched off.
func (o *layerOps) startLoRA(lay model.BatchLayout, train bool) {
	a := o.g.lora
	if a == nil || !a.host.AdapterOn() || o.N == 0 {
		return
	}
	p := &loraPass{a: a, u: o.s.get(F32, o.N*a.r), du: o.s.get(F32, o.N*a.r)}
	if drop, seed, step := a.host.AdapterDropout(); drop > 0 && train {
		keys := model.DropoutRowKeys(lay.Tokens, lay.Pos)
		p.keys = o.s.ints(unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(keys))), 2*len(keys)))
		p.seed, p.step = seed, step
		p.thr, p.inv = model.DropoutThreshold(drop)
		p.x = o.s.get(F32, o.N*a.maxIn)
	}
	o.lora = p
}

// input is drop(in) for module lm: in itself without dropout, else in
// times the module's mask in the pass's scratch.
func (p *loraPass) input(dv *Device, lm *gpuLoRA, in *Buffer, N int) (*Buffer, error) {
	if p.keys == nil {
		return in, nil
	}
	x, err := p.x.Slice(0, N*lm.in)
	if err != nil {
		return nil, err
	}
	return x, dv.LoRADropout(x, in, p.keys, model.DropoutModuleKey(p.seed, p.step, lm.layer, lm.target), p.thr, p.inv, N, lm.in)
}

// modules are the pass's adapted modules of projection w of layer l.
func (p *loraPass) modules(l int, w model.Weight) []*gpuLoRA {
	var out []*gpuLoRA
	for _, lm := range p.a.mods[l] {
		if lm != nil && lm.w == w {
			out = append(out, lm)
		}
	}
	return out
}

// adapterForward adds every targeted module of projection w of layer l
// to out[N, O]: out[:, col:col+out] += s · (drop(in) Aᵀ) Bᵀ.
func (o *layerOps) adapterForward(out, in *Buffer, l int, w model.Weight, O int) {
	p := o.lora
	if p == nil {
		return
	}
	dv, N, r := o.g.dv, o.N, p.a.r
	for _, lm := range p.modules(l, w) {
		o.do(l, "forward (LoRA "+peft.Targets[lm.target]+")", func() error {
			x, err := p.input(dv, lm, in, N)
			if err != nil {
				return err
			}
			u, err := p.u.Slice(0, N*r)
			if err != nil {
				return err
			}
			dst, err := out.Slice(lm.col, out.n)
			if err != nil {
				return err
			}
			if err := dv.Gemm(false, true, N, r, lm.in, 1, x, lm.in, lm.A, lm.in, 0, u, r); err != nil {
				return err
			}
			return dv.Gemm(false, true, N, lm.out, r, p.a.scale, u, r, lm.B, r, 1, dst, O)
		})
	}
}

// loraLinearBack is LinearBack on a LoRA Model: the base's input gradient
// alone (din = dout·W, overwritten; the base takes no gradient), then for
// every targeted module of projection w of layer l, from dout[N, O] at
// the input in:
//
//	u = drop(in) Aᵀ, gB += s · doutᵀ u, du = s · dout B, gA += duᵀ drop(in),
//	din += mask ⊙ (du A).
func (o *layerOps) loraLinearBack(din, dout, in *Buffer, l int, w model.Weight) {
	g := o.g
	o.unit(l, w)
	wt, _, I, O := o.linear(&g.w, l, w)
	w16 := o.half(l, w)
	o.do(l, "backward", func() error { return g.linearBackInput(din, dout, wt, w16, o.N, I, O) })
	p := o.lora
	if p == nil {
		return
	}
	dv, N, r, s := g.dv, o.N, p.a.r, p.a.scale
	for _, lm := range p.modules(l, w) {
		o.do(l, "backward (LoRA "+peft.Targets[lm.target]+")", func() error {
			x, err := p.input(dv, lm, in, N)
			if err != nil {
				return err
			}
			u, err := p.u.Slice(0, N*r)
			if err != nil {
				return err
			}
			du, err := p.du.Slice(0, N*r)
			if err != nil {
				return err
			}
			dt, err := dout.Slice(lm.col, dout.n)
			if err != nil {
				return err
			}
			steps := []func() error{
				func() error { return dv.Gemm(false, true, N, r, lm.in, 1, x, lm.in, lm.A, lm.in, 0, u, r) },
				func() error { return dv.Gemm(true, false, lm.out, r, N, s, dt, O, u, r, 1, lm.gB, r) },
				func() error { return dv.Gemm(false, false, N, r, lm.out, s, dt, O, lm.B, r, 0, du, r) },
				func() error { return dv.Gemm(true, false, r, lm.in, N, 1, du, r, x, lm.in, 1, lm.gA, lm.in) },
			}
			if p.keys == nil {
				steps = append(steps, func() error { return dv.Gemm(false, false, N, lm.in, r, 1, du, r, lm.A, lm.in, 1, din, lm.in) })
			} else {
				// drop(in) is no longer needed: its buffer takes du A.
				steps = append(steps,
					func() error { return dv.Gemm(false, false, N, lm.in, r, 1, du, r, lm.A, lm.in, 0, x, lm.in) },
					func() error {
						return dv.LoRADropoutAdd(din, x, p.keys, model.DropoutModuleKey(p.seed, p.step, lm.layer, lm.target), p.thr, p.inv, N, lm.in)
					})
			}
			for _, f := range steps {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// linearBackInput is din[N,I] = dout[N,O]·w[O,I] (overwritten), the input
// gradient alone of a frozen projection; with w16 (the projection held in
// bfloat16) the GEMM takes bfloat16 operands, as linearBack's.
func (g *Model) linearBackInput(din, dout, w, w16 *Buffer, N, I, O int) error {
	if w16 == nil {
		return g.dv.Gemm(false, false, N, I, O, 1, dout, O, w, I, 0, din, I)
	}
	d16, err := g.round(0, dout)
	if err != nil {
		return err
	}
	return g.dv.GemmBF16(false, false, N, I, O, 1, d16, O, w16, I, 0, din, I)
}

// LoRADropout: out[N,I] = x[N,I] times the dropout mask of the module
// keyed key over rows keyed keys (I32 [2N], each row's uint64 key), as
// learner/model's adapterInput: 0 where mix64(mix64(key ^ keys[t]) + i)
// >> 11 < thr, inv elsewhere (model.DropoutThreshold).
func (dv *Device) LoRADropout(out, x, keys *Buffer, key, thr uint64, inv float32, N, I int) error {
	if err := dv.needAll("LoRADropout", arg{"out", out, F32, N * I}, arg{"x", x, F32, N * I}, arg{"keys", keys, I32, 2 * N}); err != nil {
		return err
	}
	return dv.launch("lora_dropout", dv.gridFor(N*I), blockSize, out, x, keys, key, thr, inv, N, I)
}

// LoRADropoutAdd: din[N,I] += dx[N,I] times LoRADropout's mask, as
// learner/model's adapterBackward.
func (dv *Device) LoRADropoutAdd(din, dx, keys *Buffer, key, thr uint64, inv float32, N, I int) error {
	if err := dv.needAll("LoRADropoutAdd", arg{"din", din, F32, N * I}, arg{"dx", dx, F32, N * I}, arg{"keys", keys, I32, 2 * N}); err != nil {
		return err
	}
	return dv.launch("lora_dropout_add", dv.gridFor(N*I), blockSize, din, dx, keys, key, thr, inv, N, I)
}

// loraStepMemory is StepMemory of a LoRA step (NewLoRA): on the device the
// frozen base as NewFrozen holds it (WeightBytes of a frozen model: float32,
// or with bf16 the projections and head in bfloat16, Compute), the
// adapter, its gradients and its AdamW moments (float32; the moments
// allocated by the first Step), one micro-batch's pass (PassBytes) and the
// adapter's products in it (LoRAPassBytes); no reference model (the base
// is the reference). The host keeps the policy's float32 model, base and
// adapter, from which the base is uploaded and checkpoints are written.
func loraStepMemory(w backend.Workload, bf16 bool) (host, device backend.Memory) {
	l := w.LoRA
	base, comp, _, _ := WeightBytes(w.Model, true, bf16)
	device = backend.Memory{Weights: base, Compute: comp, Adapter: 4 * l.Trainable, Grads: 4 * l.Trainable, Optimizer: 8 * l.Trainable,
		Activations: PassBytes(w.Model, w.Pass, bf16) + LoRAPassBytes(w.Pass.Tokens(), l.Rank, l.MaxIn, l.Dropout)}
	return backend.Memory{Weights: 4 * model.ParamCount(w.Model), Adapter: 4 * l.Trainable, Activations: StoredInputBytes(w.Model, w.Pass)}, device
}

// LoRAPassBytes is what a pass of N tokens of a LoRA Model takes beyond
// the model's own pass (startLoRA's buffers, from the scratch pool): the
// rank-r products u and du, and with dropout the rows' keys and the
// masked input of the widest module.
func LoRAPassBytes(N, r, maxIn int, dropout bool) int64 {
	n := 2 * int64(poolSize(N*r)) * int64(F32.Size())
	if dropout {
		n += int64(poolSize(2*N))*int64(I32.Size()) + int64(poolSize(N*maxIn))*int64(F32.Size())
	}
	return n
}
