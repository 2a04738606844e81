package optim

import (
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/par"
)

// Param is one named parameter tensor, flattened: Data are its values,
// Grad the gradient of the loss with respect to them (same length). Names
// identify the optimiser state across steps and checkpoints.
type Param struct {
	Name string
	Data []float32
	Grad []float32
}

// moments is the AdamW state of one tensor.
type moments struct {
	m, v []float32
}

// AdamW is the optimiser. Its zero value is not usable; call New.
// It is not safe for concurrent use.
type AdamW struct {
	cfg   Config
	steps int64 // updates applied so far
	state map[string]*moments
	order []string // tensor names in first-seen order (serialisation order)
}

// New returns an AdamW with empty state.
func New(cfg Config) (*AdamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AdamW{cfg: cfg, state: map[string]*moments{}}, nil
}

// Config returns the optimiser's configuration.
func (o *AdamW) Config() Config { return o.cfg }

// SetConfig replaces the hyper-parameters (for example when a run resumes
// with a changed learning rate); the moments and step count are kept.
func (o *AdamW) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	o.cfg = cfg
	return nil
}

// Steps returns the number of updates applied (restored by UnmarshalState).
func (o *AdamW) Steps() int64 { return o.steps }

// LR returns the learning rate the next update will use.
func (o *AdamW) LR() float64 { return o.cfg.LRAt(o.steps) }

// Check reports parameters that Step would reject: Data and Grad of
// different lengths, a repeated name, or a length that differs from the
// state restored for that name.
func (o *AdamW) Check(params []Param) error {
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		if len(p.Data) != len(p.Grad) {
			return fmt.Errorf("optim: parameter %d (%q) has %d values but %d gradients", i, p.Name, len(p.Data), len(p.Grad))
		}
		if seen[p.Name] {
			return fmt.Errorf("optim: parameter name %q appears twice: names key the optimiser state and must be unique", p.Name)
		}
		seen[p.Name] = true
		if s, ok := o.state[p.Name]; ok && len(s.m) != len(p.Data) {
			return fmt.Errorf("optim: parameter %q has %d values but its optimiser state has %d: the model and the checkpoint's optimiser state do not match", p.Name, len(p.Data), len(s.m))
		}
	}
	return nil
}

// Step applies one AdamW update to params and returns the global L2 norm
// of their gradients before clipping. It scales the gradients by
// min(1, GradClip/(norm+1e-6)) inside the update and leaves Grad itself
// unchanged. If the norm is NaN or infinite nothing is updated (the step
// count does not advance either) and the norm is returned for the caller
// to report, as veRL skips such steps.
//
// Step panics if Check(params) reports an error; call Check once after
// building the parameter list or restoring a checkpoint.
func (o *AdamW) Step(params []Param) (gradNorm float64) {
	if err := o.Check(params); err != nil {
		panic(err)
	}
	chunks := splitChunks(params)
	gradNorm = globalNorm(params, chunks)
	if math.IsNaN(gradNorm) || math.IsInf(gradNorm, 0) {
		return gradNorm
	}
	for _, p := range params {
		if _, ok := o.state[p.Name]; !ok {
			o.state[p.Name] = &moments{m: make([]float32, len(p.Data)), v: make([]float32, len(p.Data))}
			o.order = append(o.order, p.Name)
		}
	}
	k := o.cfg.kernelAt(o.steps, gradNorm)
	par.Tasks(len(chunks), func(_, c int) {
		ch := chunks[c]
		p := params[ch.param]
		s := o.state[p.Name]
		k.apply(p.Data[ch.lo:ch.hi], p.Grad[ch.lo:ch.hi], s.m[ch.lo:ch.hi], s.v[ch.lo:ch.hi])
	})
	o.steps++
	return gradNorm
}

// kernel holds one update's float32 constants.
type kernel struct {
	scale, decay, b1, oneMinusB1, b2, oneMinusB2, stepSize, bc2Sqrt, eps float32
}

// kernelAt is the constants of the update after steps updates, with the
// gradients clipped from their global norm gradNorm to GradClip.
func (c Config) kernelAt(steps int64, gradNorm float64) kernel {
	scale := 1.0
	if c.GradClip > 0 {
		scale = math.Min(1, c.GradClip/(gradNorm+1e-6))
	}
	lr := c.LRAt(steps)
	t := float64(steps + 1)
	return kernel{
		scale:      float32(scale),
		decay:      float32(1 - lr*c.WeightDecay),
		b1:         float32(c.Beta1),
		oneMinusB1: float32(1 - c.Beta1),
		b2:         float32(c.Beta2),
		oneMinusB2: float32(1 - c.Beta2),
		stepSize:   float32(lr / (1 - math.Pow(c.Beta1, t))),
		bc2Sqrt:    float32(math.Sqrt(1 - math.Pow(c.Beta2, t))),
		eps:        float32(c.Eps),
	}
}

// apply is the AdamW update of torch.optim.AdamW (single-tensor path), per
// element, in float32:
//
//	g  = grad*scale
//	p *= 1 - lr*wd
//	m  = b1*m + (1-b1)*g
//	v  = b2*v + (1-b2)*g*g
//	p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
func (k kernel) apply(data, grad, m, v []float32) {
	n := len(data)
	if n == 0 {
		return
	}
	grad, m, v = grad[:n], m[:n], v[:n]
	for i := k.applyVector(data, grad, m, v); i < n; i++ {
		g := grad[i] * k.scale
		mi := m[i]*k.b1 + k.oneMinusB1*g
		vi := v[i]*k.b2 + k.oneMinusB2*g*g
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))/k.bc2Sqrt + k.eps
		data[i] = data[i]*k.decay - k.stepSize*(mi/denom)
	}
}

// GradNorm returns the global L2 norm of the gradients of params,
// accumulated in float64.
func GradNorm(params []Param) float64 {
	return globalNorm(params, splitChunks(params))
}

// chunk is a slice [lo, hi) of one parameter, the unit of parallel work.
type chunk struct {
	param, lo, hi int
}

// chunkSize balances scheduling overhead against load balance: 64Ki
// floats is 256 KiB per array.
const chunkSize = 1 << 16

func splitChunks(params []Param) []chunk {
	var out []chunk
	for i, p := range params {
		for lo := 0; lo < len(p.Grad); lo += chunkSize {
			out = append(out, chunk{i, lo, min(lo+chunkSize, len(p.Grad))})
		}
	}
	return out
}

// globalNorm sums squares per chunk in parallel and adds the partial sums
// in chunk order, so the result does not depend on scheduling.
func globalNorm(params []Param, chunks []chunk) float64 {
	partial := make([]float64, len(chunks))
	par.Tasks(len(chunks), func(_, c int) {
		ch := chunks[c]
		partial[c] = SquaredSum(params[ch.param].Grad[ch.lo:ch.hi])
	})
	return NormOfSquares(partial)
}

// SquaredSum is the sum of the squares of g in float64, as the global
// gradient norm sums one chunk: sixteen running sums, element i into sum
// i mod 16 (the AVX2 kernel's four registers of four), added pairwise.
func SquaredSum(g []float32) float64 {
	var acc [16]float64
	for i := squaredSumVector(&acc, g); i < len(g); i++ {
		a := float64(g[i])
		acc[i%16] += a * a
	}
	for w := 8; w >= 1; w /= 2 {
		for j := range w {
			acc[j] += acc[j+w]
		}
	}
	return acc[0]
}

// NormOfSquares is the global norm from every chunk's SquaredSum, added
// in chunk order.
func NormOfSquares(partial []float64) float64 {
	var sum float64
	for _, s := range partial {
		sum += s
	}
	return math.Sqrt(sum)
}
