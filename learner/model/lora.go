package model

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/blas"
	"github.com/aipo-rl/aipo/learner/peft"
)

// LoRA adapters on a frozen base. AttachAdapter gives the model a
// learner/peft adapter: each targeted projection then computes
//
//	y = x Wᵀ + s · (drop(x) Aᵀ) Bᵀ
//
// in the CPU's Linear op, and its backward pass (LinearBack) adds the
// gradients of A and B and the adapter's share of the input's gradient.
// The base is frozen: with an adapter attached the backward pass computes
// no gradient of any base tensor (projections, norms, embeddings, head)
// and holds no buffer for them; Params and Grads (and so the optimiser,
// the data-parallel reduction and the optimiser state on disk) are the
// adapter's matrices under PEFT's key names. SetAdapterOn(false) runs the
// base alone: the reference policy of the KL term, without a second model.
//
// The stacked projections (q, k, v; gate, up) keep one base product; each
// targeted module adds its rank-r product into its own columns of the
// output. Dropout (PEFT's lora_dropout) applies to the adapter's input in
// training passes only (Forward, not Score or Logits), as PEFT's does in
// train mode. Its mask is a hash of the run's seed, the step
// (SetAdapterStep), the layer, the module, the token's position and the
// tokens of its sequence up to it, and the feature: the same token of the
// same sequence draws the same mask wherever it is packed, so that the
// ranks of a data-parallel group (which pack shards the same at every
// size) and an activation-checkpointed recompute draw the same bits.

// adapter is the model's attached LoRA adapter.
type adapter struct {
	cfg     peft.Config
	scale   float32
	r       int
	dropout float32
	seed    uint64
	step    uint64
	on      bool
	// mods[l][t] is layer l's module of peft.Targets[t], nil when not
	// targeted.
	mods   [][]*loraModule
	order  []*loraModule // storage order (peft's: by layer, then target)
	params []float32     // every A then B of every module, in order
	grads  []float32     // aligned with params; nil until a backward pass
}

// loraModule is one adapted projection; A [r, in] and B [out, r] view the
// adapter's flat buffers.
type loraModule struct {
	layer, target int
	in, out       int
	col           int // first output column in the stacked projection's output
	off           int // A's offset in params (B follows A)
}

func (a *adapter) views(buf []float32, m *loraModule) (A, B []float32) {
	na, nb := a.r*m.in, m.out*a.r
	return buf[m.off : m.off+na : m.off+na], buf[m.off+na : m.off+na+nb : m.off+na+nb]
}

// AdapterDims are the sizes a LoRA adapter on a model of cfg follows.
func AdapterDims(cfg Config) peft.Dims {
	d := dimsOf(cfg)
	return peft.Dims{Layers: d.L, Hidden: d.C, Intermediate: d.F, QDim: d.QD, KVDim: d.KD}
}

// targetIndex is t's index in peft.Targets.
func targetIndex(t string) int {
	for i, x := range peft.Targets {
		if x == t {
			return i
		}
	}
	return -1
}

// targetWeight is the stacked projection peft.Targets[t] belongs to and
// its first output column in it.
func targetWeight(d dims, t int) (Weight, int) {
	switch peft.Targets[t] {
	case "q_proj":
		return WQKV, 0
	case "k_proj":
		return WQKV, d.QD
	case "v_proj":
		return WQKV, d.QD + d.KD
	case "o_proj":
		return WO, 0
	case "gate_proj":
		return WGateUp, 0
	case "up_proj":
		return WGateUp, d.F
	}
	return WDown, 0
}

// AttachAdapter makes ad (its matrices copied) the model's trained
// parameters on its frozen base, switched on; seed keys its dropout. The
// adapter must fit the model's sizes (peft's CheckBase). The model's base
// gradients, if any were allocated, are let go. A sharded, bfloat16-held
// or decode-only model cannot take one.
func (m *Model) AttachAdapter(ad *peft.Adapter, seed uint64) error {
	if m.shard != nil || m.narrow != nil || m.decodeOnly() {
		return fmt.Errorf("model: a LoRA adapter needs the base's float32 weights held whole (not sharded, bfloat16-held or decode-only)")
	}
	if err := ad.Config.Check(); err != nil {
		return err
	}
	if err := ad.CheckBase(AdapterDims(m.cfg)); err != nil {
		return err
	}
	a := &adapter{cfg: ad.Config, scale: ad.Config.Scale(), r: ad.Config.R, dropout: float32(ad.Config.Dropout), seed: seed, on: true,
		mods: make([][]*loraModule, m.d.L)}
	for l := range a.mods {
		a.mods[l] = make([]*loraModule, len(peft.Targets))
	}
	off := 0
	for _, pm := range ad.Modules {
		t := targetIndex(pm.Target)
		if a.mods[pm.Layer][t] != nil {
			return fmt.Errorf("model: the adapter has %s twice", pm.Base())
		}
		_, col := targetWeight(m.d, t)
		lm := &loraModule{layer: pm.Layer, target: t, in: pm.In, out: pm.Out, col: col, off: off}
		off += a.r*pm.In + pm.Out*a.r
		a.mods[pm.Layer][t] = lm
		a.order = append(a.order, lm)
	}
	a.params = make([]float32, off)
	for i, pm := range ad.Modules {
		A, B := a.views(a.params, a.order[i])
		copy(A, pm.A)
		copy(B, pm.B)
	}
	m.gradMu.Lock()
	m.g = weights{}
	m.gradMu.Unlock()
	m.lora = a
	return nil
}

// HasAdapter reports whether a LoRA adapter is attached.
func (m *Model) HasAdapter() bool { return m.lora != nil }

// Adapter is the attached adapter as learner/peft holds it, its matrices
// copied from the model's (nil without one).
func (m *Model) Adapter() *peft.Adapter {
	a := m.lora
	if a == nil {
		return nil
	}
	out := &peft.Adapter{Config: a.cfg}
	for _, lm := range a.order {
		A, B := a.views(a.params, lm)
		out.Modules = append(out.Modules, peft.Module{Layer: lm.layer, Target: peft.Targets[lm.target], In: lm.in, Out: lm.out,
			A: append([]float32(nil), A...), B: append([]float32(nil), B...)})
	}
	return out
}

// SetAdapterOn switches the attached adapter on or off for the passes that
// follow: off, the model is its base (the KL term's reference).
func (m *Model) SetAdapterOn(on bool) {
	if m.lora != nil {
		m.lora.on = on
	}
}

// SetAdapterStep keys the adapter's dropout masks of the passes that
// follow by step (the optimiser's step count), so that each step draws
// new masks and every rank the same ones.
func (m *Model) SetAdapterStep(step uint64) {
	if m.lora != nil {
		m.lora.step = step
	}
}

// adapterNamed lists the adapter's matrices in buf (params or grads)
// under PEFT's keys.
func (a *adapter) named(buf []float32) []NamedTensor {
	out := make([]NamedTensor, 0, 2*len(a.order))
	for _, lm := range a.order {
		A, B := a.views(buf, lm)
		t := peft.Targets[lm.target]
		out = append(out,
			NamedTensor{Name: peft.Key(lm.layer, t, "A"), Shape: []int{a.r, lm.in}, Data: A},
			NamedTensor{Name: peft.Key(lm.layer, t, "B"), Shape: []int{lm.out, a.r}, Data: B})
	}
	return out
}

// AdapterParams are the adapter's matrices under PEFT's keys (Data aliases
// the model); nil without an adapter.
func (m *Model) AdapterParams() []NamedTensor {
	if m.lora == nil {
		return nil
	}
	return m.lora.named(m.lora.params)
}

// AdapterGrads are the adapter's gradients, aligned with AdapterParams
// (allocated, zero, on the first call).
func (m *Model) AdapterGrads() []NamedTensor {
	if m.lora == nil {
		return nil
	}
	return m.lora.named(m.adapterGrads())
}

func (m *Model) adapterGrads() []float32 {
	m.gradMu.Lock()
	defer m.gradMu.Unlock()
	if m.lora.grads == nil {
		m.lora.grads = make([]float32, len(m.lora.params))
	}
	return m.lora.grads
}

// AdapterParamData is the attached adapter's matrices as one flat buffer,
// the one AdapterParams' tensors view, in their order (each module's A
// then B, the modules by layer then target); nil without an adapter.
func (m *Model) AdapterParamData() []float32 {
	if m.lora == nil {
		return nil
	}
	return m.lora.params
}

// AdapterGradData is the adapter's gradients as one flat buffer laid out
// as AdapterParamData (allocated, zero, on the first call); nil without
// an adapter.
func (m *Model) AdapterGradData() []float32 {
	if m.lora == nil {
		return nil
	}
	return m.adapterGrads()
}

// AdapterOn reports whether an adapter is attached and switched on
// (SetAdapterOn).
func (m *Model) AdapterOn() bool { return m.active() != nil }

// AdapterDropout is the attached adapter's dropout probability and the
// seed and step (SetAdapterStep) that key its masks (DropoutModuleKey).
func (m *Model) AdapterDropout() (p float32, seed, step uint64) {
	if a := m.lora; a != nil {
		return a.dropout, a.seed, a.step
	}
	return 0, 0, 0
}

// frozen reports whether the base takes no gradients (an adapter is
// attached).
func (m *Model) frozen() bool { return m.lora != nil }

// active is the adapter when it is attached and on.
func (m *Model) active() *adapter {
	if a := m.lora; a != nil && a.on {
		return a
	}
	return nil
}

// dropoutMask writes into mask[N*in] the keep mask (0 or 1/(1-p)) of
// module lm over the pass's rows.
func (o *cpuOps) dropoutMask(a *adapter, lm *loraModule, in int) []float32 {
	N := o.n()
	mask := o.scratch(N * in)
	keys := o.rowKeys()
	thr, inv := DropoutThreshold(a.dropout)
	base := DropoutModuleKey(a.seed, a.step, lm.layer, lm.target)
	parallelFor(N, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			k := mix64(base ^ keys[t])
			row := mask[t*in : (t+1)*in]
			for i := range row {
				if mix64(k+uint64(i))>>11 < thr {
					row[i] = 0
				} else {
					row[i] = inv
				}
			}
		}
	})
	return mask
}

// rowKeys are a hash per row of its position and its sequence's tokens up
// to it (computed once a pass).
func (o *cpuOps) rowKeys() []uint64 {
	if o.keys != nil {
		return o.keys
	}
	o.keys = DropoutRowKeys(o.p.tokens, o.p.pos)
	return o.keys
}

// DropoutRowKeys are the adapter dropout's key of each row of a pass over
// tokens at positions pos (a pass's packing, as Layout gives it): a hash
// of the row's position and its sequence's tokens up to it. A device
// backend draws its masks from the same keys.
func DropoutRowKeys(tokens, pos []int32) []uint64 {
	keys := make([]uint64, len(tokens))
	var h uint64
	for t, tok := range tokens {
		if pos[t] == 0 {
			h = 0xcbf29ce484222325
		}
		h = mix64(h ^ uint64(uint32(tok)))
		keys[t] = mix64(h ^ uint64(pos[t])<<32)
	}
	return keys
}

// DropoutModuleKey is the key of the dropout masks of the adapted module
// of peft.Targets[target] in layer, for a run's seed at an optimiser step.
// Feature i of row t is dropped when mix64(mix64(key ^ rowKey[t]) + i) >>
// 11 (splitmix64's output function, 53 bits) is below DropoutThreshold's
// thr, and kept scaled by its inv otherwise.
func DropoutModuleKey(seed, step uint64, layer, target int) uint64 {
	return mix64(seed ^ mix64(step+0x632be59bd9b4e019) ^ mix64(uint64(layer*len(peft.Targets)+target)+0x9e3779b97f4a7c15))
}

// DropoutThreshold is the 53-bit threshold below which a dropout of
// probability p drops a feature, and the scale 1/(1-p) of a kept one.
func DropoutThreshold(p float32) (thr uint64, inv float32) {
	return uint64(float64(p) * (1 << 53)), 1 / (1 - p)
}

// mix64 is splitmix64's output function.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// scratch is n floats for the adapter's products (from the pass's arena
// when it has one).
func (o *cpuOps) scratch(n int) []float32 {
	if o.mem != nil {
		return o.mem.get(n)
	}
	return make([]float32, n)
}

func (o *cpuOps) unscratch(b []float32) {
	if o.mem != nil && b != nil {
		o.mem.put(b)
	}
}

// adapterInput is drop(in) for module lm: in itself without dropout (or
// outside training), else in times the module's mask (mask returned too).
func (o *cpuOps) adapterInput(a *adapter, lm *loraModule, in []float32) (x, mask []float32) {
	if a.dropout == 0 || !o.train {
		return in, nil
	}
	N := o.n()
	mask = o.dropoutMask(a, lm, lm.in)
	x = o.scratch(N * lm.in)
	for i := range x[:N*lm.in] {
		x[i] = in[i] * mask[i]
	}
	return x, mask
}

// adapterForward adds every targeted module of projection w of layer l to
// out[N, O]: out[:, col:col+out] += s · (drop(in) Aᵀ) Bᵀ.
func (o *cpuOps) adapterForward(out, in []float32, l int, w Weight, O int) {
	a := o.m.active()
	if a == nil {
		return
	}
	N, r := o.n(), a.r
	for _, lm := range a.mods[l] {
		if lm == nil {
			continue
		}
		if tw, _ := targetWeight(o.m.d, lm.target); tw != w {
			continue
		}
		A, B := a.views(a.params, lm)
		x, mask := o.adapterInput(a, lm, in)
		u := o.scratch(N * r)
		blas.Sgemm(false, true, N, r, lm.in, 1, x, lm.in, A, lm.in, 0, u, r)
		blas.Sgemm(false, true, N, lm.out, r, a.scale, u, r, B, r, 1, out[lm.col:], O)
		o.unscratch(u)
		if mask != nil {
			o.unscratch(x)
			o.unscratch(mask)
		}
	}
}

// adapterBackward adds, for every targeted module of projection w of
// layer l, the gradients of A and B from dout[N, O] at the input in, and
// the module's share of the input's gradient to din[N, I]:
//
//	u = drop(in) Aᵀ, gB += s · doutᵀ u, du = s · dout B, gA += duᵀ drop(in),
//	din += mask ⊙ (du A).
func (o *cpuOps) adapterBackward(din, dout, in []float32, l int, w Weight, O int) {
	a := o.m.active()
	if a == nil {
		return
	}
	g := o.m.adapterGrads()
	N, r := o.n(), a.r
	for _, lm := range a.mods[l] {
		if lm == nil {
			continue
		}
		if tw, _ := targetWeight(o.m.d, lm.target); tw != w {
			continue
		}
		A, B := a.views(a.params, lm)
		gA, gB := a.views(g, lm)
		x, mask := o.adapterInput(a, lm, in)
		u := o.scratch(N * r)
		du := o.scratch(N * r)
		dt := dout[lm.col:]
		blas.Sgemm(false, true, N, r, lm.in, 1, x, lm.in, A, lm.in, 0, u, r)
		blas.Sgemm(true, false, lm.out, r, N, a.scale, dt, O, u, r, 1, gB, r)
		blas.Sgemm(false, false, N, r, lm.out, a.scale, dt, O, B, r, 0, du, r)
		blas.Sgemm(true, false, r, lm.in, N, 1, du, r, x, lm.in, 1, gA, lm.in)
		if mask == nil {
			blas.Sgemm(false, false, N, lm.in, r, 1, du, r, A, lm.in, 1, din, lm.in)
		} else {
			dx := x // drop(in) is no longer needed: its buffer takes du A
			blas.Sgemm(false, false, N, lm.in, r, 1, du, r, A, lm.in, 0, dx, lm.in)
			for i := range dx[:N*lm.in] {
				din[i] += dx[i] * mask[i]
			}
			o.unscratch(dx)
			o.unscratch(mask)
		}
		o.unscratch(u)
		o.unscratch(du)
	}
}

// AdapterParamCount is the number of trained parameters of a LoRA adapter
// of rank r on targets (PEFT's names) of a model of cfg.
func AdapterParamCount(cfg Config, r int, targets []string) (int64, error) {
	d := AdapterDims(cfg)
	var n int64
	for _, t := range targets {
		in, out, err := d.InOut(t)
		if err != nil {
			return 0, err
		}
		n += int64(r) * int64(in+out)
	}
	return n * int64(d.Layers), nil
}
