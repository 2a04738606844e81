package plan

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// LoRA is what a LoRA run (learner.lora) trains: the adapters' rank,
// targets and parameters. Its learner holds the frozen base whole (float32
// on the CPU), the adapters with their gradients (float32) and AdamW
// moments (float32 m and v), and no reference (the base is the KL term's);
// its checkpoints are the adapters and their moments, the base written
// once.
type LoRA struct {
	Rank      int
	Targets   []string
	Trainable int64
	// Dropout is learner.lora.dropout: above 0 a pass also holds each
	// module's input mask.
	Dropout float64
}

// planLoRA reads the LoRA run's adapters: learner.lora's settings, or
// those of the adapter learner.lora.adapter continues.
func planLoRA(cfg runconfig.Config, mc model.Config) (*LoRA, error) {
	lc := cfg.Learner.LoRA
	l := &LoRA{Rank: lc.Rank, Targets: lc.Targets, Dropout: lc.Dropout}
	if lc.Adapter != "" {
		ad, err := peft.Read(context.Background(), lc.Adapter)
		if err != nil {
			return nil, fmt.Errorf("plan: learner.lora.adapter %s: %w", lc.Adapter, err)
		}
		l.Rank, l.Targets = ad.Config.R, ad.Config.TargetModules
	}
	n, err := model.AdapterParamCount(mc, l.Rank, l.Targets)
	if err != nil {
		return nil, fmt.Errorf("plan: learner.lora: %w", err)
	}
	l.Trainable = n
	return l, nil
}

// scratch is the most the adapters' products take in a pass of n tokens
// beyond the model's own activations: the rank-r products u and du of
// the module in flight and, with dropout, its masked input and mask (at
// most the MLP's width a token).
func (l *LoRA) scratch(mc model.Config, n int) int64 {
	per := int64(2 * l.Rank)
	if l.Dropout > 0 {
		per += 2 * int64(max(mc.IntermediateSize, mc.HiddenSize, mc.NumAttentionHeads*mc.Head()))
	}
	return 4 * int64(n) * per
}

// loraLearnPhase is a LoRA run's learner step on the CPU: the frozen base
// and the adapters, the adapters' gradients and moments (rank 0's share of
// them in a group), the pass's activations and the adapters' scratch; and
// the state kept between steps (the base, the adapters, their moments).
func (p *Plan) loraLearnPhase(activations int64, proc Line) (Phase, Line) {
	l, P := p.LoRA, p.Params
	A := l.Trainable
	moments, momentsLine := 8*A, "the adapters' AdamW moments (float32 m and v)"
	if g := p.Group; g != nil {
		moments = (8*A + int64(g.Ranks) - 1) / int64(g.Ranks)
		momentsLine = fmt.Sprintf("the adapters' AdamW moments of rank 0's share (float32 m and v, 1/%d)", g.Ranks)
	}
	learn := Phase{Name: "learner step"}
	base, baseWhat := 4*P, "float32 base"
	if g := p.Group; g != nil && len(g.Base) > 0 {
		// Stage 3: rank 0's share of the base, and the two units a
		// pass holds gathered.
		b0 := g.Base[0]
		base, baseWhat = b0.Share, "share of the float32 base"
		learn.Lines = append(learn.Lines,
			Line{What: fmt.Sprintf("frozen base weights of rank 0's share (float32, 1/%d of every unit; no gradients; also the KL term's reference)", g.Ranks), Host: b0.Share},
			Line{What: "the frozen base's units a pass holds gathered (float32: the one it reads and the next)", Host: b0.Units})
	} else {
		learn.Lines = append(learn.Lines, Line{What: "frozen base weights (float32, no gradients; also the KL term's reference)", Host: 4 * P})
	}
	learn.Lines = append(learn.Lines,
		Line{What: fmt.Sprintf("LoRA adapters (rank %d on %s: %s parameters, float32)", l.Rank, strings.Join(l.Targets, ", "), fmtCount(A)), Host: 4 * A},
		Line{What: "the adapters' gradients (float32)", Host: 4 * A},
		Line{What: momentsLine, Host: moments},
		Line{What: fmt.Sprintf("activations of a %d-token micro-batch (checkpointing %s)", p.PassTokens, onOff(p.Checkpointing)), Host: activations},
		Line{What: "the adapters' products and dropout masks of the module in flight", Host: l.scratch(p.Model, p.PassTokens)},
	)
	if g := p.Group; g != nil {
		learn.Lines = append(learn.Lines, Line{What: "the data-parallel step's adapter gradient buffers (the shard's, the reduced sum)", Host: 2 * 4 * A})
	}
	learn.Lines = append(learn.Lines, proc)
	held := Line{What: fmt.Sprintf("learner state kept between steps (%s, adapters and their moments)", baseWhat), Host: base + 4*A + moments}
	return learn, held
}

// loraDisk sizes a LoRA run's checkpoints: each the adapters (float32)
// and their moments, the base once in <run>/lora-base in its dtype.
func loraDisk(cfg runconfig.Config, mc model.Config, P, A int64) Disk {
	var d Disk
	d.Serving, d.Full = 4*A, 12*A
	base := P * int64(checkpoint.ModelDType(mc).Size())
	var have []int64
	for k := int64(0); k <= cfg.Run.Steps; k++ {
		have = append(have, k)
		held := base
		for _, s := range have {
			if s == 0 {
				held += d.Serving
			} else {
				held += d.Full
			}
		}
		if held > d.MostHeld {
			d.MostHeld, d.MostCount = held, len(have)
		}
		keep := cfg.Checkpoint.Retained(have, func(int64) bool { return true }, func(int64) bool { return false })
		have = slices.DeleteFunc(have, func(s int64) bool { return !keep[s] })
	}
	d.Final = have
	return d
}

// loraSummary is the plan's line on a LoRA run's adapters and checkpoints.
func (p Plan) loraSummary() string {
	l, dk := p.LoRA, p.Disk
	base := p.Params * int64(checkpoint.ModelDType(p.Model).Size())
	return fmt.Sprintf("LoRA: rank %d on %s, %s trained parameters (%.3f%% of %s), the base frozen; checkpoints: %s each (the adapters and their moments), the base once in <run>/lora-base (%s); the run directory holds at most %d checkpoints and the base, %s; at the end %v (checkpoint.keep_last %d, keep_every %d)\n",
		l.Rank, strings.Join(l.Targets, ", "), fmtCount(l.Trainable), 100*float64(l.Trainable)/float64(p.Params), fmtCount(p.Params),
		fmtBytes(dk.Full), fmtBytes(base), dk.MostCount, fmtBytes(dk.MostHeld), dk.Final, p.Config.Checkpoint.KeepLast, p.Config.Checkpoint.KeepEvery)
}

// loraWork is the LoRA run's adapter as the backends plan it, nil for a
// run that trains every weight.
func (p *Plan) loraWork() *backend.LoRAWork {
	l := p.LoRA
	if l == nil {
		return nil
	}
	w := &backend.LoRAWork{Rank: l.Rank, Trainable: l.Trainable, Dropout: l.Dropout > 0}
	d := model.AdapterDims(p.Model)
	for _, t := range l.Targets {
		if in, _, err := d.InOut(t); err == nil {
			w.MaxIn = max(w.MaxIn, in)
		}
	}
	return w
}

// loraLearnPhaseGPU is a LoRA run's learner step on a GPU (learner.backend
// cuda: learner/cuda's NewLoRA), from the backend's figures st: on the
// GPU the frozen base as it holds it (float32, or with learner.precision
// bf16 its projections and LM head in bfloat16), the adapters with their
// gradients and AdamW moments (rank 0's share in a group, which reduces
// and steps on the GPUs over NCCL: the device group's buffers of the
// adapters' size), one micro-batch's pass with the adapters' products;
// on the host the policy's float32 model (base and adapters), from which
// the base is uploaded and the checkpoints written. Between steps the
// host keeps that model and the moments.
func (p *Plan) loraLearnPhaseGPU(st trainer.StepMemory, proc Line) (Phase, Line) {
	l, d, A := p.LoRA, st.Device, p.LoRA.Trainable
	baseLine := "frozen base weights (float32, no gradients; also the KL term's reference)"
	if d.Compute > 0 {
		baseLine = "frozen base's embedding, norms and biases (float32, no gradients; the base is also the KL term's reference)"
	}
	moments, momentsLine := d.Optimizer, "the adapters' AdamW moments (float32 m and v)"
	learn := Phase{Name: "learner step"}
	if g := p.Group; g != nil && len(g.Base) > 0 {
		// Stage 3 (describeLoRA; learner/cuda's ShardBase): rank 0's
		// share of the base, the unit buffers the group holds and the
		// rotary table; in bfloat16 the share held as the bfloat16
		// passes read it.
		b0 := g.Base[0]
		dtype, units := "float32", "the frozen base's gathered unit and the gather's receive buffer (float32, two of the largest unit, held as long as the group)"
		if b0.BytesPerElement == 2 {
			dtype, units = "bfloat16 where its products read it so, its embedding, norms and biases float32", "the frozen base's weights' buffer (a gathered unit's float32 tensors and bfloat16 values, held as long as the group)"
		}
		learn.Lines = append(learn.Lines,
			Line{What: fmt.Sprintf("frozen base weights of rank 0's share (%s, 1/%d of every unit; no gradients; also the KL term's reference)", dtype, g.Ranks), Device: b0.Share},
			Line{What: units, Device: b0.Units})
		if b0.Rotary > 0 {
			learn.Lines = append(learn.Lines, Line{What: "the rotary table (float32 cos and sin for every position)", Device: b0.Rotary})
		}
	} else {
		learn.Lines = append(learn.Lines, Line{What: baseLine, Device: d.Weights})
		if d.Compute > 0 {
			learn.Lines = append(learn.Lines, Line{What: "frozen base's projections and LM head (bfloat16)", Device: d.Compute})
		}
	}
	if g := p.Group; g != nil {
		moments = (8*A + int64(g.Ranks) - 1) / int64(g.Ranks)
		momentsLine = fmt.Sprintf("the adapters' AdamW moments of rank 0's share (float32 m and v, 1/%d)", g.Ranks)
	}
	learn.Lines = append(learn.Lines,
		Line{What: fmt.Sprintf("LoRA adapters (rank %d on %s: %s parameters, float32)", l.Rank, strings.Join(l.Targets, ", "), fmtCount(A)), Device: d.Adapter},
		Line{What: "the adapters' gradients (float32)", Device: d.Grads},
		Line{What: momentsLine, Device: moments},
		Line{What: fmt.Sprintf("activations of a %d-token micro-batch (checkpointing %s), the adapters' products and dropout masks with them", p.PassTokens, p.checkpointingWords()), Host: st.Host.Activations, Device: d.Activations},
	)
	if g := p.Group; g != nil {
		// The device group's tree sum of the rank's shards and the
		// exchange's receive buffer, each the adapters' size (dpgroup.go).
		learn.Lines = append(learn.Lines, Line{What: "the device group's adapter gradient buffers (the shards' sum, the exchange's receive buffer)", Device: 2 * 4 * A})
	}
	learn.Lines = append(learn.Lines,
		Line{What: "the policy's float32 model on the host (the base, uploaded from it, and the adapters; checkpoints are written from it)", Host: st.Host.Weights + st.Host.Adapter},
		proc, cudaContext)
	held := Line{What: "learner state kept between steps (the host's float32 base and adapters, the adapters' moments)", Host: st.Host.Weights + st.Host.Adapter + moments}
	return learn, held
}
