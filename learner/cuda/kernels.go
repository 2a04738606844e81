package cuda

import (
	"embed"
	"fmt"
	"math"
	"path"
	"runtime"
	"unsafe"

	"github.com/aipo-rl/aipo/learner/optim"
)

// The kernel wrappers in this file validate their arguments and queue a
// launch on the Device's stream. Whether the kernels compute what their CPU
// counterparts do is verified by the Parity tests: on a GPU
// (scripts/gpu-check.sh), and on any machine with a C++ compiler through
// TestFakeDriver, whose stand-in driver runs the kernel sources on the
// host (testdata/emu). The tests also check that every kernel is an entry
// of the embedded PTX.

// ptxFiles holds the PTX that scripts/ptx.sh compiles from kernels/*.cu.
//
//go:embed ptx/*.ptx
var ptxFiles embed.FS

// kernelModules maps each PTX module (ptx/<name>.ptx, from
// kernels/<name>.cu) to the kernels this package launches from it. Every
// name must be a ".visible .entry" of its module (checked by the tests and
// at Open).
var kernelModules = map[string][]string{
	"rmsnorm":     {"rmsnorm_forward", "rmsnorm_backward_dx", "rmsnorm_backward_dw"},
	"swiglu":      {"swiglu_forward", "swiglu_backward"},
	"elementwise": {"residual_forward", "scale_f32", "cast_f32_to_bf16", "cast_bf16_to_f32", "bias_add_rows", "bias_grad"},
	"rope":        {"rope_forward", "rope_backward"},
	"qknorm":      {"qk_norm_forward", "qk_norm_backward_dx", "qk_norm_backward_dw"},
	"embedding":   {"embedding_forward", "embedding_backward"},
	"adamw":       {"adamw_step", "adamw_step_clip"},
	"norm":        {"sumsq_partial", "sumsq_final"},
	"lmhead":      {"lmhead_logprob", "lmhead_dlogits", "lmhead_dlogits_cols"},
	"kl":          {"kl_k3"},
	"lora":        {"lora_dropout", "lora_dropout_add"},
	"attention": {"attention_forward", "attention_forward_d64", "attention_forward_d128",
		"attention_backward_delta", "attention_backward_dq", "attention_backward_dq_d64", "attention_backward_dq_d128",
		"attention_backward_dkdv", "attention_backward_dkdv_d64", "attention_backward_dkdv_d128",
		"attention_cached", "attention_cached_d64", "attention_cached_d128", "kv_append",
		"attention_cached_bf16", "attention_cached_bf16_d64", "attention_cached_bf16_d128", "kv_append_bf16"},
}

// modulePTX returns the embedded PTX of a module.
func modulePTX(module string) ([]byte, error) {
	return ptxFiles.ReadFile(path.Join("ptx", module+".ptx"))
}

// loadKernels JIT-compiles every module and looks its kernels up; it runs
// on the Device's thread.
func (dv *Device) loadKernels() error {
	d := dv.d
	for module, names := range kernelModules {
		src, err := modulePTX(module)
		if err != nil {
			return fmt.Errorf("embedded PTX of %s: %w", module, err)
		}
		image := append(src[:len(src):len(src)], 0) // cuModuleLoadData wants a NUL-terminated string
		var m uintptr
		err = d.err("cuModuleLoadData "+module+".ptx", d.cuModuleLoadData(&m, unsafe.Pointer(&image[0])))
		runtime.KeepAlive(image)
		if err != nil {
			return err
		}
		dv.modules = append(dv.modules, m)
		for _, name := range names {
			var f uintptr
			cname := cString(name)
			if err := d.err("cuModuleGetFunction "+name, d.cuModuleGetFunction(&f, m, &cname[0])); err != nil {
				return err
			}
			dv.funcs[name] = f
		}
	}
	return nil
}

// blockSize is the threads per block of every kernel (AIPO_BLOCK in
// kernels/common.cuh).
const blockSize = 256

// gridFor returns the blocks for a grid-stride kernel over n elements:
// enough for one element per thread, capped at 32 blocks per
// multiprocessor since the kernels loop beyond that.
func (dv *Device) gridFor(n int) uint32 {
	g := (n + blockSize - 1) / blockSize
	if c := 32 * max(dv.sms, 1); g > c {
		g = c
	}
	return uint32(g)
}

// need checks that b is a live buffer of this device holding dt with at
// least n elements.
func (dv *Device) need(kernel, arg string, b *Buffer, dt DType, n int) error {
	if err := b.usable(); err != nil {
		return fmt.Errorf("cuda: %s: %s: %w", kernel, arg, err)
	}
	if b.dev != dv {
		return fmt.Errorf("cuda: %s: %s belongs to another device", kernel, arg)
	}
	if b.dt != dt {
		return fmt.Errorf("cuda: %s: %s holds %s, want %s", kernel, arg, b.dt, dt)
	}
	if b.n < n {
		return fmt.Errorf("cuda: %s: %s has %d elements, needs %d", kernel, arg, b.n, n)
	}
	return nil
}

type arg struct {
	name string
	b    *Buffer
	dt   DType
	n    int
}

func (dv *Device) needAll(kernel string, args ...arg) error {
	for _, a := range args {
		if err := dv.need(kernel, a.name, a.b, a.dt, a.n); err != nil {
			return err
		}
	}
	return nil
}

// RMSNormForward: out[N,C] = x*rstd*w, rstd[N] = 1/sqrt(mean(x^2)+eps), as
// learner/model's rmsnormForward.
func (dv *Device) RMSNormForward(out, rstd, x, w *Buffer, N, C int, eps float64) error {
	if err := dv.needAll("RMSNormForward", arg{"out", out, F32, N * C}, arg{"rstd", rstd, F32, N},
		arg{"x", x, F32, N * C}, arg{"w", w, F32, C}); err != nil {
		return err
	}
	return dv.launch("rmsnorm_forward", uint32(N), blockSize, out, rstd, x, w, N, C, eps)
}

// RMSNormBackward adds the input gradient into dx[N,C] and the weight
// gradient into dw[C] (nil: none, a frozen norm), as learner/model's
// rmsnormBackward.
func (dv *Device) RMSNormBackward(dx, dw, dout, x, w, rstd *Buffer, N, C int) error {
	if err := dv.needAll("RMSNormBackward", arg{"dx", dx, F32, N * C},
		arg{"dout", dout, F32, N * C}, arg{"x", x, F32, N * C}, arg{"w", w, F32, C}, arg{"rstd", rstd, F32, N}); err != nil {
		return err
	}
	if dw != nil {
		if err := dv.need("RMSNormBackward", "dw", dw, F32, C); err != nil {
			return err
		}
	}
	if err := dv.launch("rmsnorm_backward_dx", uint32(N), blockSize, dx, dout, x, w, rstd, N, C); err != nil {
		return err
	}
	if dw == nil { // a frozen norm (LoRA's base): its input's gradient alone
		return nil
	}
	return dv.launch("rmsnorm_backward_dw", uint32((C+blockSize-1)/blockSize), blockSize, dw, dout, x, rstd, N, C)
}

// SwiGLUForward: h[N,F] = silu(g)*u and sig[N,F] = sigmoid(g), gu[N,2F]
// holding g then u per row, as learner/model's swigluForward.
func (dv *Device) SwiGLUForward(h, sig, gu *Buffer, N, F int) error {
	if err := dv.needAll("SwiGLUForward", arg{"h", h, F32, N * F}, arg{"sig", sig, F32, N * F}, arg{"gu", gu, F32, 2 * N * F}); err != nil {
		return err
	}
	return dv.launch("swiglu_forward", dv.gridFor(N*F), blockSize, h, sig, gu, N, F)
}

// SwiGLUBackward writes dgu[N,2F] from dh[N,F], as learner/model's
// swigluBackward.
func (dv *Device) SwiGLUBackward(dgu, dh, sig, gu *Buffer, N, F int) error {
	if err := dv.needAll("SwiGLUBackward", arg{"dgu", dgu, F32, 2 * N * F}, arg{"dh", dh, F32, N * F},
		arg{"sig", sig, F32, N * F}, arg{"gu", gu, F32, 2 * N * F}); err != nil {
		return err
	}
	return dv.launch("swiglu_backward", dv.gridFor(N*F), blockSize, dgu, dh, sig, gu, N, F)
}

// ResidualForward: out[i] = a[i] + b[i] over out's length.
func (dv *Device) ResidualForward(out, a, b *Buffer) error {
	n := 0
	if out != nil {
		n = out.n
	}
	if err := dv.needAll("ResidualForward", arg{"out", out, F32, n}, arg{"a", a, F32, n}, arg{"b", b, F32, n}); err != nil {
		return err
	}
	return dv.launch("residual_forward", dv.gridFor(n), blockSize, out, a, b, n)
}

// Scale multiplies x in place by s (for clip_grad_norm_-style clipping).
func (dv *Device) Scale(x *Buffer, s float32) error {
	if err := dv.need("Scale", "x", x, F32, 0); err != nil {
		return err
	}
	return dv.launch("scale_f32", dv.gridFor(x.n), blockSize, x, x.n, s)
}

// CastToBF16 rounds src (F32) into dst (BF16), nearest-even, as
// learner/checkpoint's Float32ToBF16.
func (dv *Device) CastToBF16(dst, src *Buffer) error {
	if err := dv.need("CastToBF16", "src", src, F32, 0); err != nil {
		return err
	}
	if err := dv.need("CastToBF16", "dst", dst, BF16, src.n); err != nil {
		return err
	}
	return dv.launch("cast_f32_to_bf16", dv.gridFor(src.n), blockSize, dst, src, src.n)
}

// CastToF32 widens src (BF16) into dst (F32); it is exact.
func (dv *Device) CastToF32(dst, src *Buffer) error {
	if err := dv.need("CastToF32", "src", src, BF16, 0); err != nil {
		return err
	}
	if err := dv.need("CastToF32", "dst", dst, F32, src.n); err != nil {
		return err
	}
	return dv.launch("cast_bf16_to_f32", dv.gridFor(src.n), blockSize, dst, src, src.n)
}

// RoPEForward rotates in place heads 0..nHeads-1 (D columns each, from
// column 0) of each row of x[N,ld], row r by the angle of position pos[r]
// (I32, N = pos.Len()); cos and sin are the [positions, D/2] rows of
// learner/model's rope table (rotate_half pairing: i with i+D/2).
func (dv *Device) RoPEForward(x *Buffer, ld int, pos *Buffer, nHeads, D int, cos, sin *Buffer) error {
	return dv.rope("rope_forward", x, ld, pos, nHeads, D, cos, sin)
}

// RoPEBackward applies the transposed rotation to the gradient dx of
// RoPEForward's output, in place.
func (dv *Device) RoPEBackward(dx *Buffer, ld int, pos *Buffer, nHeads, D int, cos, sin *Buffer) error {
	return dv.rope("rope_backward", dx, ld, pos, nHeads, D, cos, sin)
}

func (dv *Device) rope(kernel string, x *Buffer, ld int, pos *Buffer, nHeads, D int, cos, sin *Buffer) error {
	if err := dv.need(kernel, "pos", pos, I32, 0); err != nil {
		return err
	}
	if D%2 != 0 || D <= 0 || nHeads*D > ld {
		return fmt.Errorf("cuda: %s: %d heads of %d columns do not fit rows of %d", kernel, nHeads, D, ld)
	}
	N := pos.n
	if err := dv.need(kernel, "cos", cos, F32, D/2); err != nil {
		return err
	}
	if err := dv.needAll(kernel, arg{"x", x, F32, N * ld}, arg{"sin", sin, F32, cos.n}); err != nil {
		return err
	}
	// The kernel cannot check positions against the table (that would
	// need a copy of pos); the table's rows bound them.
	return dv.launch(kernel, dv.gridFor(N*nHeads*D/2), blockSize, x, ld, pos, N, nHeads, D, cos, sin)
}

// qkNormRows are the rows of one block of the q/k norm's weight-gradient
// partial sums.
const qkNormRows = 32

// qkNormPartials is the length of QKNormBackward's scratch for N rows of
// head width D.
func qkNormPartials(N, D int) int { return (N + qkNormRows - 1) / qkNormRows * 2 * D }

// qkNormShape checks the heads of a q/k norm against rows of ld columns.
func qkNormShape(kernel string, N, ld, H, KV, D int) error {
	if N < 0 || H <= 0 || KV <= 0 || D <= 0 || (H+KV)*D > ld {
		return fmt.Errorf("cuda: %s: N=%d, %d query and %d key heads of %d columns do not fit rows of %d", kernel, N, H, KV, D, ld)
	}
	return nil
}

// QKNormForward normalises in place, with Qwen3's per-head RMS norm, the
// H query heads and then KV key heads (D columns each, from column 0) of
// every row of qkv[N,ld]: query heads with w[0:D] (q_norm), key heads with
// w[D:2D] (k_norm), as learner/model's qkNormForward. raw (N*(H+KV)*D) and
// rstd (N*(H+KV)) receive the heads before the norm and their
// 1/sqrt(mean(x^2)+eps), for QKNormBackward; both nil keep nothing.
func (dv *Device) QKNormForward(qkv, raw, rstd, w *Buffer, N, ld, H, KV, D int, eps float64) error {
	if err := qkNormShape("QKNormForward", N, ld, H, KV, D); err != nil {
		return err
	}
	heads := N * (H + KV)
	args := []arg{{"qkv", qkv, F32, N * ld}, {"w", w, F32, 2 * D}}
	if raw != nil || rstd != nil {
		args = append(args, arg{"raw", raw, F32, heads * D}, arg{"rstd", rstd, F32, heads})
	}
	if err := dv.needAll("QKNormForward", args...); err != nil {
		return err
	}
	return dv.launch("qk_norm_forward", uint32((heads+blockSize/32-1)/(blockSize/32)), blockSize,
		qkv, raw, rstd, w, N, ld, H, KV, D, eps)
}

// QKNormBackward replaces in place the gradient of the normalised heads in
// dqkv[N,ld] by the gradient of the heads before the norm and adds the
// weights' gradient to dw[2D] (q_norm then k_norm; nil: none, frozen
// norms, and partial unused), given QKNormForward's raw and rstd, as
// learner/model's qkNormBackward. partial (F32, qkNormPartials(N, D)) is
// scratch.
func (dv *Device) QKNormBackward(dqkv, dw, raw, rstd, w, partial *Buffer, N, ld, H, KV, D int) error {
	if err := qkNormShape("QKNormBackward", N, ld, H, KV, D); err != nil {
		return err
	}
	heads, P := N*(H+KV), (N+qkNormRows-1)/qkNormRows
	if err := dv.needAll("QKNormBackward", arg{"dqkv", dqkv, F32, N * ld},
		arg{"raw", raw, F32, heads * D}, arg{"rstd", rstd, F32, heads}, arg{"w", w, F32, 2 * D}); err != nil {
		return err
	}
	if dw == nil { // frozen q/k norms (LoRA's base): the input's gradient alone
		return dv.launch("qk_norm_backward_dx", uint32((heads+blockSize/32-1)/(blockSize/32)), blockSize,
			dqkv, raw, rstd, w, N, ld, H, KV, D)
	}
	if err := dv.needAll("QKNormBackward", arg{"dw", dw, F32, 2 * D}, arg{"partial", partial, F32, P * 2 * D}); err != nil {
		return err
	}
	// The weights' gradient reads the incoming gradient, which the input
	// gradient then overwrites.
	if err := dv.launch("qk_norm_backward_dw", uint32(P), blockSize, partial, dqkv, raw, rstd, N, ld, H, KV, D, qkNormRows); err != nil {
		return err
	}
	if P > 0 {
		if err := dv.BiasGrad(dw, partial, P, 2*D); err != nil {
			return err
		}
	}
	return dv.launch("qk_norm_backward_dx", uint32((heads+blockSize/32-1)/(blockSize/32)), blockSize,
		dqkv, raw, rstd, w, N, ld, H, KV, D)
}

// EmbeddingForward: out[N,C] = emb[tokens[t], :] with N = tokens.Len()
// and V = emb.Len()/C rows. Token ids outside [0, V) give NaN rows.
func (dv *Device) EmbeddingForward(out, tokens, emb *Buffer, C int) error {
	if err := dv.need("EmbeddingForward", "tokens", tokens, I32, 0); err != nil {
		return err
	}
	N := tokens.n
	if err := dv.needAll("EmbeddingForward", arg{"out", out, F32, N * C}, arg{"emb", emb, F32, C}); err != nil {
		return err
	}
	return dv.launch("embedding_forward", dv.gridFor(N*C), blockSize, out, tokens, emb, N, C, emb.n/C)
}

// EmbeddingBackward: dEmb[V,C] += scatter of dout[N,C] by tokens, in token
// order (bit-identical to the CPU). Token ids outside [0, V) are skipped.
func (dv *Device) EmbeddingBackward(dEmb, dout, tokens *Buffer, C int) error {
	if err := dv.need("EmbeddingBackward", "tokens", tokens, I32, 0); err != nil {
		return err
	}
	N := tokens.n
	if err := dv.needAll("EmbeddingBackward", arg{"dout", dout, F32, N * C}, arg{"dEmb", dEmb, F32, C}); err != nil {
		return err
	}
	return dv.launch("embedding_backward", uint32((C+blockSize-1)/blockSize), blockSize, dEmb, dout, tokens, N, C, dEmb.n/C)
}

// AdamWStep holds the float32 constants of one AdamW update, computed as
// learner/optim.AdamW.Step computes them.
type AdamWStep struct {
	Scale, Decay, B1, OneMinusB1, B2, OneMinusB2, StepSize, BC2Sqrt, Eps float32
}

// NewAdamWStep returns the constants of update number steps (counting
// from 0, i.e. optim.AdamW.Steps() before the update) with gradients
// scaled by scale (ClipScale's result).
func NewAdamWStep(cfg optim.Config, steps int64, scale float64) AdamWStep {
	lr := cfg.LRAt(steps)
	t := float64(steps + 1)
	return AdamWStep{
		Scale:      float32(scale),
		Decay:      float32(1 - lr*cfg.WeightDecay),
		B1:         float32(cfg.Beta1),
		OneMinusB1: float32(1 - cfg.Beta1),
		B2:         float32(cfg.Beta2),
		OneMinusB2: float32(1 - cfg.Beta2),
		StepSize:   float32(lr / (1 - math.Pow(cfg.Beta1, t))),
		BC2Sqrt:    float32(math.Sqrt(1 - math.Pow(cfg.Beta2, t))),
		Eps:        float32(cfg.Eps),
	}
}

// ClipScale is the factor learner/optim applies to the gradients:
// min(1, clip/(norm+1e-6)), or 1 when clip is 0.
func ClipScale(norm, clip float64) float64 {
	if clip <= 0 {
		return 1
	}
	return math.Min(1, clip/(norm+1e-6))
}

// AdamW applies one update to the float32 master weights p with gradient
// g and moments m and v (all F32, p's length), as learner/optim's kernel.
func (dv *Device) AdamW(p, g, m, v *Buffer, s AdamWStep) error {
	if err := dv.need("AdamW", "p", p, F32, 0); err != nil {
		return err
	}
	n := p.n
	if err := dv.needAll("AdamW", arg{"g", g, F32, n}, arg{"m", m, F32, n}, arg{"v", v, F32, n}); err != nil {
		return err
	}
	return dv.launch("adamw_step", dv.gridFor(n), blockSize, p, g, m, v, n,
		s.Scale, s.Decay, s.B1, s.OneMinusB1, s.B2, s.OneMinusB2, s.StepSize, s.BC2Sqrt, s.Eps)
}

// AdamWClipped is AdamW with the clip scale decided on the device from
// sumsq (F64, one element: GradSumSq's result), as learner/optim decides
// it: min(1, clip/(norm+1e-6)) with clip > 0, else 1; s.Scale is not
// used. With a norm that is not finite the kernel changes nothing.
func (dv *Device) AdamWClipped(p, g, m, v, sumsq *Buffer, s AdamWStep, clip float64) error {
	if err := dv.need("AdamWClipped", "p", p, F32, 0); err != nil {
		return err
	}
	n := p.n
	if err := dv.needAll("AdamWClipped", arg{"g", g, F32, n}, arg{"m", m, F32, n}, arg{"v", v, F32, n}, arg{"sumsq", sumsq, F64, 1}); err != nil {
		return err
	}
	return dv.launch("adamw_step_clip", dv.gridFor(n), blockSize, p, g, m, v, n, sumsq, clip,
		s.Decay, s.B1, s.OneMinusB1, s.B2, s.OneMinusB2, s.StepSize, s.BC2Sqrt, s.Eps)
}

// GradNorm returns the global L2 norm of the F32 buffers grads, summing
// squares in float64 in two passes (per-block partials, then one block),
// like learner/optim.GradNorm. It waits for the result.
func (dv *Device) GradNorm(grads []*Buffer) (float64, error) {
	total, err := dv.sumSqPartials("GradNorm", grads)
	if err != nil {
		return 0, err
	}
	partial, err := dv.Alloc(F64, total+1) // the last slot receives the sum
	if err != nil {
		return 0, err
	}
	defer partial.Free()
	sum, err := partial.Slice(total, total+1)
	if err != nil {
		return 0, err
	}
	if err := dv.GradSumSq(sum, partial, grads); err != nil {
		return 0, err
	}
	var out [1]float64
	if err := sum.CopyToFloat64(out[:]); err != nil {
		return 0, err
	}
	return math.Sqrt(out[0]), nil
}

// sumSqPartials checks grads and returns the partial sums GradSumSq
// takes for them.
func (dv *Device) sumSqPartials(kernel string, grads []*Buffer) (int, error) {
	total := 0
	for i, g := range grads {
		if err := dv.need(kernel, fmt.Sprintf("grads[%d]", i), g, F32, 0); err != nil {
			return 0, err
		}
		total += int(dv.gridFor(g.n))
	}
	return total, nil
}

// GradSumSq queues the sum of squares of every element of the F32
// buffers grads into sum[0] (F64), partial (F64, at least as many
// elements as the grid blocks of grads: GradNorm's count) holding the
// per-block sums; nothing is read back.
func (dv *Device) GradSumSq(sum, partial *Buffer, grads []*Buffer) error {
	total, err := dv.sumSqPartials("GradSumSq", grads)
	if err != nil {
		return err
	}
	if err := dv.needAll("GradSumSq", arg{"sum", sum, F64, 1}, arg{"partial", partial, F64, total}); err != nil {
		return err
	}
	off := 0
	for _, g := range grads {
		nb := dv.gridFor(g.n)
		if nb == 0 {
			continue
		}
		part, err := partial.Slice(off, off+int(nb))
		if err != nil {
			return err
		}
		if err := dv.launch("sumsq_partial", nb, blockSize, part, g, g.n); err != nil {
			return err
		}
		off += int(nb)
	}
	return dv.launch("sumsq_final", 1, blockSize, sum, partial, total)
}

// Attention limits of kernels/attention.cu: rows per block (one thread
// each) and the widest head.
const (
	attRows = 64
	attMaxD = 128
)

// SegmentBounds returns, for packed sequences of the given lengths, each
// token's sequence start and end (exclusive) as the attention kernels
// take them (upload both as I32 buffers).
func SegmentBounds(seqLens []int) (start, end []int32) {
	n := 0
	for _, l := range seqLens {
		n += l
	}
	start, end = make([]int32, 0, n), make([]int32, 0, n)
	pos := 0
	for _, l := range seqLens {
		for range l {
			start = append(start, int32(pos))
			end = append(end, int32(pos+l))
		}
		pos += l
	}
	return start, end
}

// attKernel is the entry of an attention kernel for head width D: the
// variant compiled for that width where there is one (its per-thread
// state in registers), else the generic one.
func attKernel(name string, D int) string {
	if D == 64 || D == 128 {
		return fmt.Sprintf("%s_d%d", name, D)
	}
	return name
}

// attShape checks the attention dimensions shared by both directions.
func attShape(kernel string, N, H, KV, D int) error {
	switch {
	case N < 0 || H <= 0 || KV <= 0 || D <= 0:
		return fmt.Errorf("cuda: %s: N=%d H=%d KV=%d D=%d must be positive", kernel, N, H, KV, D)
	case H%KV != 0:
		return fmt.Errorf("cuda: %s: %d query heads do not split into %d key/value groups", kernel, H, KV)
	case D > attMaxD:
		return fmt.Errorf("cuda: %s: head width %d exceeds the kernel's %d", kernel, D, attMaxD)
	}
	return nil
}

// AttentionForward: causal grouped-query attention over packed sequences,
// y[N,H*D] and lse[N,H] from qkv[N,(H+2KV)*D], as learner/model's
// attentionForward; segStart (I32, N) is each token's sequence start
// (SegmentBounds). No N x N matrix is formed.
func (dv *Device) AttentionForward(y, lse, qkv, segStart *Buffer, N, H, KV, D int) error {
	if err := attShape("AttentionForward", N, H, KV, D); err != nil {
		return err
	}
	QKV := (H + 2*KV) * D
	if err := dv.needAll("AttentionForward", arg{"y", y, F32, N * H * D}, arg{"lse", lse, F32, N * H},
		arg{"qkv", qkv, F32, N * QKV}, arg{"segStart", segStart, I32, N}); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(D)))
	return dv.launch2D(attKernel("attention_forward", D), uint32((N+attRows-1)/attRows), uint32(H), attRows,
		y, lse, qkv, segStart, N, H, KV, D, scale)
}

// AttentionBackward writes dqkv[N,(H+2KV)*D] (overwritten) from dy[N,H*D]
// and the forward's qkv, y and lse, as learner/model's attentionBackward.
// delta (F32, N*H) is scratch.
func (dv *Device) AttentionBackward(dqkv, dy, qkv, y, lse, segStart, segEnd, delta *Buffer, N, H, KV, D int) error {
	if err := attShape("AttentionBackward", N, H, KV, D); err != nil {
		return err
	}
	QKV := (H + 2*KV) * D
	if err := dv.needAll("AttentionBackward", arg{"dqkv", dqkv, F32, N * QKV}, arg{"dy", dy, F32, N * H * D},
		arg{"qkv", qkv, F32, N * QKV}, arg{"y", y, F32, N * H * D}, arg{"lse", lse, F32, N * H},
		arg{"segStart", segStart, I32, N}, arg{"segEnd", segEnd, I32, N}, arg{"delta", delta, F32, N * H}); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(D)))
	if err := dv.launch("attention_backward_delta", dv.gridFor(N*H), blockSize, delta, dy, y, N, H, D); err != nil {
		return err
	}
	blocks := uint32((N + attRows - 1) / attRows)
	if err := dv.launch2D(attKernel("attention_backward_dq", D), blocks, uint32(H), attRows,
		dqkv, dy, qkv, lse, delta, segStart, N, H, KV, D, scale); err != nil {
		return err
	}
	return dv.launch2D(attKernel("attention_backward_dkdv", D), blocks, uint32(KV), attRows,
		dqkv, dy, qkv, lse, delta, segEnd, N, H, KV, D, scale)
}

// BiasAdd adds b[O] to every row of out[N,O].
func (dv *Device) BiasAdd(out, b *Buffer, N, O int) error {
	if err := dv.needAll("BiasAdd", arg{"out", out, F32, N * O}, arg{"b", b, F32, O}); err != nil {
		return err
	}
	return dv.launch("bias_add_rows", dv.gridFor(N*O), blockSize, out, b, N, O)
}

// BiasGrad adds the column sums of dout[N,O] to db[O], rows in order.
func (dv *Device) BiasGrad(db, dout *Buffer, N, O int) error {
	if err := dv.needAll("BiasGrad", arg{"db", db, F32, O}, arg{"dout", dout, F32, N * O}); err != nil {
		return err
	}
	return dv.launch("bias_grad", uint32((O+blockSize-1)/blockSize), blockSize, db, dout, N, O)
}

// AttentionCached: y[nq,H*D] for nq new query rows of qkv[nq,(H+2KV)*D]
// at positions p0..p0+nq-1 of one sequence, against the rotated keys and
// values of positions 0..p0+nq-1 in the rows of kc and vc ([*,KV*D], the
// new rows already appended), as learner/model's decoding attention. The
// caches are F32, or BF16 (a bfloat16 KV cache: each value widened as it
// is read, the arithmetic float32's).
func (dv *Device) AttentionCached(y, qkv, kc, vc *Buffer, nq, p0, H, KV, D int) error {
	if err := attShape("AttentionCached", nq, H, KV, D); err != nil {
		return err
	}
	KD := KV * D
	kernel, dt := "attention_cached", cacheDType(kc)
	if dt == BF16 {
		kernel = "attention_cached_bf16"
	}
	if err := dv.needAll("AttentionCached", arg{"y", y, F32, nq * H * D}, arg{"qkv", qkv, F32, nq * (H*D + 2*KD)},
		arg{"kc", kc, dt, (p0 + nq) * KD}, arg{"vc", vc, dt, (p0 + nq) * KD}); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(D)))
	return dv.launch2D(attKernel(kernel, D), uint32((nq+attRows-1)/attRows), uint32(H), attRows,
		y, qkv, kc, vc, nq, p0, H, KV, D, scale)
}

// KVAppend copies the key and value parts of n rows of qkv[n,QD+2KD] into
// rows row0..row0+n-1 of kc and vc ([*,KD]), F32 caches or BF16 ones
// (each value rounded to bfloat16 as it enters).
func (dv *Device) KVAppend(kc, vc, qkv *Buffer, n, row0, QD, KD int) error {
	kernel, dt := "kv_append", cacheDType(kc)
	if dt == BF16 {
		kernel = "kv_append_bf16"
	}
	if err := dv.needAll("KVAppend", arg{"kc", kc, dt, (row0 + n) * KD}, arg{"vc", vc, dt, (row0 + n) * KD},
		arg{"qkv", qkv, F32, n * (QD + 2*KD)}); err != nil {
		return err
	}
	return dv.launch(kernel, dv.gridFor(n*KD), blockSize, kc, vc, qkv, n, row0, QD, KD)
}

// cacheDType is the element type of a KV cache buffer: BF16 for a
// bfloat16 one, F32 otherwise (a nil buffer included, which the checks
// then name).
func cacheDType(kc *Buffer) DType {
	if kc != nil && kc.dt == BF16 {
		return BF16
	}
	return F32
}

// KLK3 writes, per token, the k3 estimate of KL(pi || pi_ref) from the
// policy's and the reference's log-probabilities and its derivative with
// respect to logp, as learner/loss's K3 (float64 inside, float32 out).
func (dv *Device) KLK3(kl, grad, logp, ref *Buffer) error {
	if err := dv.need("KLK3", "logp", logp, F32, 0); err != nil {
		return err
	}
	n := logp.n
	if err := dv.needAll("KLK3", arg{"kl", kl, F32, n}, arg{"grad", grad, F32, n}, arg{"ref", ref, F32, n}); err != nil {
		return err
	}
	return dv.launch("kl_k3", dv.gridFor(n), blockSize, kl, grad, logp, ref, n)
}
