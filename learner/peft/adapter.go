package peft

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/learner/blas"
)

// Dims are the sizes of the base model an adapter's matrices follow.
type Dims struct {
	Layers       int // decoder layers
	Hidden       int // hidden size
	Intermediate int // MLP intermediate size
	QDim         int // query heads x head dim (q_proj's output)
	KVDim        int // key/value heads x head dim (k_proj's and v_proj's output)
}

// InOut are target's input and output features in a model of d.
func (d Dims) InOut(target string) (in, out int, err error) {
	switch target {
	case "q_proj":
		return d.Hidden, d.QDim, nil
	case "k_proj", "v_proj":
		return d.Hidden, d.KVDim, nil
	case "o_proj":
		return d.QDim, d.Hidden, nil
	case "gate_proj", "up_proj":
		return d.Hidden, d.Intermediate, nil
	case "down_proj":
		return d.Intermediate, d.Hidden, nil
	}
	return 0, 0, fmt.Errorf("lora: unknown target %q", target)
}

// Module is one adapted linear layer: A [R, In] and B [Out, R], row-major
// as PEFT stores them.
type Module struct {
	Layer   int
	Target  string
	In, Out int
	A, B    []float32
}

// Base is the name of the base weight the module adapts, as Hugging Face
// names it (model.layers.3.self_attn.q_proj.weight).
func (m Module) Base() string { return baseName(m.Layer, m.Target) + ".weight" }

func baseName(layer int, target string) string {
	group := "self_attn"
	if target == "gate_proj" || target == "up_proj" || target == "down_proj" {
		group = "mlp"
	}
	return fmt.Sprintf("model.layers.%d.%s.%s", layer, group, target)
}

// Key is the safetensors key of the module's A (ab "A") or B (ab "B")
// matrix in adapter_model.safetensors, as PEFT's save_pretrained writes it.
func Key(layer int, target, ab string) string {
	return "base_model.model." + baseName(layer, target) + ".lora_" + ab + ".weight"
}

// parseKey is Key's inverse.
func parseKey(key string) (layer int, target, ab string, err error) {
	bad := fmt.Errorf("tensor %q is not a LoRA matrix of a decoder layer (want base_model.model.model.layers.<i>.{self_attn,mlp}.<target>.lora_{A,B}.weight)", key)
	rest, ok := strings.CutPrefix(key, "base_model.model.model.layers.")
	if !ok {
		return 0, "", "", bad
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 || parts[4] != "weight" {
		return 0, "", "", bad
	}
	layer, err = strconv.Atoi(parts[0])
	if err != nil || layer < 0 {
		return 0, "", "", bad
	}
	target = parts[2]
	if !known(target) || parts[1] != strings.Split(baseName(0, target), ".")[3] {
		return 0, "", "", bad
	}
	switch parts[3] {
	case "lora_A":
		ab = "A"
	case "lora_B":
		ab = "B"
	default:
		return 0, "", "", bad
	}
	return layer, target, ab, nil
}

// Adapter is a LoRA adapter: its configuration and its modules, ordered by
// layer and, within a layer, by Targets.
type Adapter struct {
	Config  Config
	Modules []Module
}

// New is a new adapter of c on a model of d, initialised as c says from
// rng: A drawn, B zero, so that the adapted model starts as the base.
func New(c Config, d Dims, rng *rand.Rand) (*Adapter, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	targets := append([]string(nil), c.TargetModules...)
	sortTargets(targets)
	a := &Adapter{Config: c}
	gaussian := c.InitLoraWeights == InitGaussian
	for l := 0; l < d.Layers; l++ {
		for _, t := range targets {
			in, out, err := d.InOut(t)
			if err != nil {
				return nil, err
			}
			m := Module{Layer: l, Target: t, In: in, Out: out, A: make([]float32, c.R*in), B: make([]float32, out*c.R)}
			if gaussian {
				std := 1 / float64(c.R)
				for i := range m.A {
					m.A[i] = float32(rng.NormFloat64() * std)
				}
			} else {
				bound := 1 / math.Sqrt(float64(in))
				for i := range m.A {
					m.A[i] = float32((2*rng.Float64() - 1) * bound)
				}
			}
			a.Modules = append(a.Modules, m)
		}
	}
	return a, nil
}

// Params is the number of trained parameters.
func (a *Adapter) Params() int64 {
	var n int64
	for _, m := range a.Modules {
		n += int64(len(m.A) + len(m.B))
	}
	return n
}

// CheckBase refuses an adapter whose matrices do not fit a model of d,
// naming the first module that does not and the sizes on both sides.
func (a *Adapter) CheckBase(d Dims) error {
	for _, m := range a.Modules {
		if m.Layer >= d.Layers {
			return fmt.Errorf("lora: the adapter has %s but the base model has %d layers: it was trained on another base", m.Base(), d.Layers)
		}
		in, out, err := d.InOut(m.Target)
		if err != nil {
			return err
		}
		if m.In != in || m.Out != out {
			return fmt.Errorf("lora: the adapter's %s is %d -> %d features but the base model's is %d -> %d: it was trained on another base", m.Base(), m.In, m.Out, in, out)
		}
	}
	return nil
}

// Merged is base's weight w (row-major [Out, In], Hugging Face's layout)
// with the module folded in: w + s · B A, in float32 through the
// learner's GEMM (PEFT's merge_and_unload computes the same product in the
// weight's dtype).
func (m Module) Merged(w []float32, scale float32, r int) []float32 {
	out := append([]float32(nil), w...)
	blas.Sgemm(false, false, m.Out, m.In, r, scale, m.B, r, m.A, m.In, 1, out, m.In)
	return out
}
