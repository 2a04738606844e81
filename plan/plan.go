package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/inproc"
	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// The learner step's figures are trainer.PlanStep's (each backend's
// StepMemory, computed as its code allocates). The machine's memory and
// its GPUs are what the backends' Devices report (learner/backend's
// registry: the binary links the backends it runs on).

// cudaReserve is device memory the allocator does not count: the CUDA
// context, the loaded kernels and cuBLAS's workspaces. An allowance: about
// 500 MiB for the context on recent drivers, the rest for cuBLAS.
const cudaReserve = 1 << 30

// sessionCacheBytes is the in-process engine's cache of finished session
// requests (engine.Config.SessionTokens' default: 256 MiB of positions,
// at least 4096).
func sessionCacheBytes(bytesPerToken int64) int64 {
	return max(256<<20, 4096*bytesPerToken)
}

// NamedDevice is a GPU a plan can be made for without it: `--device NAME`.
type NamedDevice struct {
	Name, Label string
	Bytes       int64 // the total memory nvidia-smi reports
}

const mib = 1 << 20

// Devices are the named devices, with the total memory nvidia-smi reports
// for each (NVIDIA's data sheets give the marketed sizes in the labels).
var Devices = []NamedDevice{
	{"h200", "NVIDIA H200 141GB", 143771 * mib},
	{"h100", "NVIDIA H100 80GB", 81559 * mib},
	{"a100-80g", "NVIDIA A100 80GB", 81920 * mib},
	{"a100-40g", "NVIDIA A100 40GB", 40960 * mib},
	{"l40s", "NVIDIA L40S 48GB", 46068 * mib},
	{"rtx4090", "NVIDIA GeForce RTX 4090 24GB", 24564 * mib},
}

// DeviceNames lists the names --device takes.
func DeviceNames() []string {
	out := make([]string, len(Devices))
	for i, d := range Devices {
		out[i] = d.Name
	}
	return out
}

// Options are the inputs of a plan besides the run's configuration.
type Options struct {
	// Init is the initial model (aipo train --init): a Hugging Face
	// directory or a checkpoint; its config.json is all the plan reads.
	// Empty: the run's checkpoint 0, else, for a run whose sources draw
	// from a task (the demo), the demo's warm-start model.
	Init string
	// Device names a GPU of Devices to plan for instead of the one found.
	Device string
	// PromptTokens is the prompt length planned for (0: the sources' kind's,
	// promptsource.Defaults: 1024 for files, 16 for the demo task, whose
	// questions are a few bytes).
	PromptTokens int
	// Baseline is the process's own memory besides the run's (0: this
	// process's resident memory now).
	Baseline int64
	// HostBytes is the host memory to plan for (0: this machine's, unless
	// Device names one, whose host is not known).
	HostBytes int64
	// Ranks is the learner's processes (aipo train --nproc N; 0: one
	// process, no group), Zero the ZeRO stage of the group (0: 1).
	Ranks, Zero int
	// Nodes is the machines the ranks are spread over (0: one), for a
	// group of GPUs; the host figures are then one machine's.
	Nodes int
}

// Line is one part of a phase's memory.
type Line struct {
	What         string
	Host, Device int64
}

// Phase is a moment of the run and what it holds then: rank 0's lines
// and, for a group, the host memory the other ranks hold then.
type Phase struct {
	Name   string
	Lines  []Line
	Others int64
}

// Host and Device are the phase's totals: the host's of every rank, the
// device's of rank 0 (every rank has a device of its own).
func (p Phase) Host() int64   { return p.sum(func(l Line) int64 { return l.Host }) + p.Others }
func (p Phase) Device() int64 { return p.sum(func(l Line) int64 { return l.Device }) }

func (p Phase) sum(f func(Line) int64) int64 {
	var n int64
	for _, l := range p.Lines {
		n += f(l)
	}
	return n
}

// Capacity is the memory of one place, when it is known.
type Capacity struct {
	Name  string // "this machine", a device's name
	Bytes int64  // 0: not known
	Note  string // how it was found, or why it is not known
}

// Disk is what the run's checkpoints take.
type Disk struct {
	Serving, Full int64 // one checkpoint of each kind
	// MostHeld is the most the run directory's checkpoints take at once
	// under checkpoint.keep_last/keep_every, MostCount how many that is;
	// Final the checkpoints kept at the end.
	MostHeld  int64
	MostCount int
	Final     []int64
}

// Fix is a change of the configuration and the plan's peaks with it.
type Fix struct {
	Change       string // the settings, as run.yaml writes them
	Phase        string // the phase it is for
	Host, Device int64
	Fits         bool
}

// Plan is the memory a run needs.
type Plan struct {
	Config    runconfig.Config
	Model     model.Config
	ModelFrom string
	Params    int64
	// PromptTokens + ResponseTokens, capped at the model's context, is
	// SeqTokens, the longest sequence; PassTokens the tokens of the
	// largest micro-batch.
	PromptTokens, ResponseTokens, SeqTokens, PassTokens int
	Checkpointing                                       bool
	Reference                                           bool
	// Group is the learner's group (aipo plan --nproc N), nil for one
	// process.
	Group *Group
	// LoRA is a LoRA run's adapters (learner.lora), nil for a run that
	// trains every weight.
	LoRA *LoRA
	// Phases: the learner step, the rollout engine's load, the rollout.
	Phases []Phase
	Disk   Disk
	Host   Capacity
	Device Capacity // Name empty on the CPU backend
	Fixes  []Fix
}

func (p Plan) cuda() bool { return p.Config.Learner.Backend != runconfig.BackendCPU }

// Peaks are the largest host and device totals over the phases.
func (p Plan) Peaks() (host, device int64) {
	for _, ph := range p.Phases {
		host, device = max(host, ph.Host()), max(device, ph.Device())
	}
	return host, device
}

// Fits reports whether the peaks fit the capacities that are known.
func (p Plan) Fits() bool {
	h, d := p.Peaks()
	return (p.Host.Bytes == 0 || h <= p.Host.Bytes) && (p.Device.Bytes == 0 || d <= p.Device.Bytes)
}

// Make computes the memory of cfg's run.
func Make(ctx context.Context, cfg runconfig.Config, o Options) (Plan, error) {
	mc, from, err := planModel(ctx, cfg, o.Init)
	if err != nil {
		return Plan{}, err
	}
	base := o.Baseline
	if base <= 0 {
		base = selfRSS()
	}
	p, err := planFor(cfg, mc, o, base)
	if err != nil {
		return Plan{}, err
	}
	p.ModelFrom = from
	switch {
	case o.HostBytes > 0:
		p.Host = Capacity{Name: "the host", Bytes: o.HostBytes, Note: "--host-gib"}
	case o.Device != "" && p.cuda():
		p.Host = Capacity{Name: "the host", Note: "the named device's host is not this machine; give its memory with --host-gib"}
	default:
		p.Host = hostCapacity(base)
	}
	if p.cuda() {
		if p.Device, err = deviceCapacity(o.Device, cfg.Learner.Backend); err != nil {
			return Plan{}, err
		}
	}
	if !p.Fits() {
		p.Fixes = fixes(cfg, mc, o, base, p.Host, p.Device)
	}
	return p, nil
}

// planModel finds the model's configuration: --init's config.json, the
// run's checkpoint 0, or, when the sources draw from a task, the demo's
// warm-start model.
func planModel(ctx context.Context, cfg runconfig.Config, init string) (model.Config, string, error) {
	read := func(dir string) (model.Config, error) {
		p := dir
		if !strings.HasSuffix(p, checkpoint.ConfigName) {
			p = storage.Join(dir, checkpoint.ConfigName)
		}
		c, err := checkpoint.LoadConfig(ctx, p)
		if err != nil {
			return c, err
		}
		return c, c.Validate()
	}
	if init != "" {
		c, err := read(init)
		if err != nil {
			return c, "", fmt.Errorf("plan: --init %s: %w (the plan reads its config.json)", init, err)
		}
		return c, init, nil
	}
	ck0 := rundir.Checkpoint(cfg.Run.Dir, 0)
	if ok, _ := storage.Exists(ctx, storage.Join(ck0, checkpoint.ConfigName)); ok {
		c, err := read(ck0)
		if err != nil {
			return c, "", fmt.Errorf("plan: the run's initial policy %s: %w", ck0, err)
		}
		return c, ck0, nil
	}
	if def := cfg.Data.Sources.Defaults(); def.InitialModel != nil {
		c, err := model.ParseConfig(def.InitialModel)
		if err != nil {
			return c, "", fmt.Errorf("plan: the initial model of data.sources (%s): %w", cfg.Data.Sources.Label(), err)
		}
		return c, def.InitialModelNote, nil
	}
	return model.Config{}, "", fmt.Errorf("plan: %w: pass --init DIR (a Hugging Face model directory or a checkpoint; its config.json is enough), or plan a run whose %s exists", ErrModelUnknown, ck0)
}

// planFor computes the phases and the disk of cfg with model mc.
func planFor(cfg runconfig.Config, mc model.Config, o Options, base int64) (Plan, error) {
	// (A LoRA run's reference is its frozen base: no second model.)
	p := Plan{Config: cfg, Model: mc, Params: model.ParamCount(mc), Reference: cfg.Learner.Loss.KLCoef != 0 && !cfg.LoRAOn()}
	if cfg.LoRAOn() {
		var err error
		if p.LoRA, err = planLoRA(cfg, mc); err != nil {
			return Plan{}, err
		}
	}
	p.sizeSequences(o.PromptTokens)
	refBF16 := checkpoint.ModelDType(mc) == checkpoint.BF16
	st, err := trainer.PlanStep(trainer.MemoryConfig{Model: mc, Backend: cfg.Learner.Backend, Precision: cfg.Learner.Precision,
		MicroBatchTokens: p.PassTokens, SequenceTokens: p.SeqTokens, Checkpointing: cfg.Learner.ActivationCheckpointing, Reference: p.Reference,
		ReferenceBF16: refBF16, LoRA: p.loraWork()})
	if err != nil {
		return Plan{}, fmt.Errorf("plan: %w", err)
	}
	p.Checkpointing = st.Checkpointing
	if p.Group, err = planGroup(cfg, mc, o); err != nil {
		return Plan{}, err
	}
	b, err := backend.Lookup(cfg.Learner.Backend)
	if err != nil {
		return Plan{}, fmt.Errorf("plan: %w", err)
	}
	proc := Line{What: "the process (binary, runtime, buffers)", Host: base}
	learn, held := p.learnPhase(st, refBF16, proc)
	switch {
	case p.LoRA != nil && p.cuda():
		learn, held = p.loraLearnPhaseGPU(st, proc)
	case p.LoRA != nil:
		learn, held = p.loraLearnPhase(st.Host.Activations, proc)
	}
	load, roll := p.enginePhases(b, held, proc)
	if g := p.Group; g != nil && p.LoRA != nil {
		// Every rank holds what rank 0 does (its share of the adapters'
		// moments rounded up), and at stage 3 its own share of the base.
		rank0 := learn.Host()
		for r := 1; r < g.perNode(); r++ {
			learn.Others += rank0 + g.baseDelta(r)
			load.Others += held.Host + base + g.baseDelta(r)
		}
		roll.Others = load.Others
	} else if g != nil {
		learn.Others = g.othersInStep(learn.Host())
		load.Others = g.othersBetweenSteps(p.Params, base)
		roll.Others = load.Others
	}
	p.Phases = []Phase{learn, load, roll}
	if g := p.Group; g != nil && g.Planned && p.LoRA == nil {
		start, err := p.startPhase(proc)
		if err != nil {
			return Plan{}, err
		}
		p.Phases = append(p.Phases, start)
	}
	p.Disk = planDisk(cfg, mc, p.Params)
	if p.LoRA != nil {
		p.Disk = loraDisk(cfg, mc, p.Params, p.LoRA.Trainable)
	}
	return p, nil
}

// sizeSequences sets the plan's sequence lengths: the prompt (prompt
// tokens, or the sources' default), the response budget, their sum within
// the model's positions, and the tokens of a learner pass.
func (p *Plan) sizeSequences(promptTokens int) {
	cfg := p.Config
	p.PromptTokens = promptTokens
	if p.PromptTokens <= 0 {
		p.PromptTokens = cfg.Data.Sources.Defaults().PromptTokens
	}
	p.ResponseTokens = cfg.Policy.MaxResponseTokens
	p.SeqTokens = p.PromptTokens + p.ResponseTokens
	if mp := p.Model.MaxPositionEmbeddings; mp > 0 && p.SeqTokens > mp {
		p.SeqTokens = mp
	}
	// A micro-batch packs whole sequences up to the budget; a longer one
	// is a micro-batch of its own; none holds more than the step's tokens.
	p.PassTokens = max(cfg.Learner.MicroBatchTokens, p.SeqTokens)
	if step := cfg.Data.BatchSize * cfg.Rollout.GroupSize * p.SeqTokens; step > 0 {
		p.PassTokens = min(p.PassTokens, max(step, p.SeqTokens))
	}
}

// learnPhase is the learner step's memory from the backend's figures st
// (rank 0's share of a group's), and the state the learner keeps between
// steps.
func (p *Plan) learnPhase(st trainer.StepMemory, refBF16 bool, proc Line) (Phase, Line) {
	g, P := p.Group, p.Params
	held := Line{What: "learner state kept between steps (float32 weights, AdamW moments)", Host: 12 * P}
	momentsLine := "AdamW moments (float32 m and v)"
	gradsLine := "gradients (float32)"
	if g != nil {
		momentsLine = fmt.Sprintf("AdamW moments of rank 0's share (float32 m and v, 1/%d)", g.Ranks)
		st.Host.Optimizer = g.Mem[0].Moments
		held = Line{What: fmt.Sprintf("rank 0's state kept between steps (float32 weights, its moments, the reduced gradient's buffer of %s)", fmtBytes(g.Mem[0].Held)),
			Host: 4*P + g.heldBetweenSteps(0)}
		if g.OnDevice && !g.Planned {
			// The group reduces on the GPUs: the rank's moments are on
			// its GPU, no gradient comes to the host.
			st.Device.Optimizer, st.Host.Optimizer = g.Mem[0].Moments, 0
			momentsLine = fmt.Sprintf("AdamW moments of rank 0's share (float32 m and v, 1/%d), on its GPU", g.Ranks)
			held.What = "rank 0's state kept between steps (float32 weights; its moments, brought from its GPU while the passes are parked)"
		}
		if g.Zero == 2 && !g.OnDevice {
			// No whole gradient: the units' gradients and the reduced
			// sums are in the step's buffers.
			st.Host.Grads = 0
		}
		if g.Zero == 3 && !g.Planned {
			// The rank holds its share of the weights; its reduced
			// gradient is in the step's buffers.
			st.Host.Weights, st.Host.Grads = g.Mem[0].Weights, 0
			held.What = fmt.Sprintf("rank 0's state kept between steps (float32 weights gathered whole for the rollout, its moments, its reduced gradient of %s)", fmtBytes(g.Mem[0].Held))
		}
		if g.Planned {
			// Stage 3 on GPUs: the rank's share of the
			// weights and its moments on its GPU, its reduced gradient
			// in the step's buffers there; gathered units (in float32,
			// or with bf16 partly bfloat16: no whole copy for the
			// GEMMs); on the host nothing of
			// the step but the reference's upload.
			st.Device.Weights, st.Device.Grads, st.Device.Optimizer, st.Device.Compute = g.Mem[0].Weights, 0, g.Mem[0].Moments, 0
			st.Host.Weights, st.Host.Grads, st.Host.Optimizer, st.Host.Compute = 0, 0, 0, 0
			momentsLine = fmt.Sprintf("AdamW moments of rank 0's share (float32 m and v, 1/%d), on its GPU", g.Ranks)
			held = Line{What: fmt.Sprintf("rank 0's state on the host between steps: the weights gathered whole for the checkpoints (float32), its AdamW moments brought from its GPU when the passes are parked (1/%d) and its share of the reference", g.Ranks),
				Host: 4*P + g.heldBetweenSteps(0)}
		}
	}
	learn := Phase{Name: "learner step"}
	add := func(what string, h, d int64) {
		if h != 0 || d != 0 {
			learn.Lines = append(learn.Lines, Line{what, h, d})
		}
	}
	weightsLine := "policy weights (float32 masters)"
	if g != nil && g.Zero == 3 {
		weightsLine = fmt.Sprintf("policy weights of rank 0's share (float32 masters, 1/%d of every layer)", g.Ranks)
	}
	add(weightsLine, st.Host.Weights, st.Device.Weights)
	if g != nil && g.Planned && len(g.Host) > 0 {
		// What zero3dev.go keeps on the host through the step: the host
		// model's whole weights (they stand for the policy after each
		// gather; a checkpoint's tensors are written from them) and the
		// host's copy of the rank's share (trainer.PlanHostOnDevices).
		h := g.Host[0]
		add("the host model's whole float32 weights, kept through the step", 4*P, 0)
		add(fmt.Sprintf("the host's copy of rank 0's share of the weights (float32, 1/%d), from the step's start until they are gathered whole at its end", g.Ranks), h.Weights, 0)
		add(fmt.Sprintf("the host's copy of rank 0's AdamW moments (float32 m and v, 1/%d), sent to its GPU as the group opens, brought back for the checkpoints and when the passes are parked", g.Ranks), h.Moments, 0)
		add(fmt.Sprintf("rank 0's share of the reference, kept on the host from the first step on (%s, 1/%d), from which its GPU's is placed", g.refHostWords(), g.Ranks), h.Reference, 0)
		add(fmt.Sprintf("rank 0's part of a full checkpoint's optimiser state at the step's end (its stage-1 run of the moments, float32, %s), beyond the share's weights, let go once gathered", fmtBytes(h.Parts)), h.PartsBeyondWeights(), 0)
	}
	add("their bfloat16 copy for the GEMMs", st.Host.Compute, st.Device.Compute)
	add(gradsLine, st.Host.Grads, st.Device.Grads)
	add(momentsLine, st.Host.Optimizer, st.Device.Optimizer)
	refLine := "reference policy (weights alone)"
	// The CPU's copy (a device's is in its compute dtype), in bfloat16 where
	// the backend counted 2 bytes a parameter for it (not on BLAS kernels
	// that would score it inexactly: model.HoldsBF16Exactly).
	switch {
	case st.Host.Reference == 0 || st.Host.Reference > 2*P:
	case refBF16:
		refLine = "reference policy (weights alone, its bfloat16 values held in bfloat16)"
	case p.Config.Learner.Precision == backend.BF16:
		refLine = "reference policy (weights alone, rounded to bfloat16 as its products read them)"
	}
	if g != nil && len(g.Ref) > 0 {
		r := g.Ref[0]
		dtype, units := "float32", "two units gathered as it scores"
		if r.BytesPerElement == 2 {
			dtype = "bfloat16"
		}
		if g.Planned {
			st.Device.Reference = r.Total()
			if r.BytesPerElement == 2 {
				// learner/cuda's frozenHalf: held as its bfloat16
				// passes read it.
				dtype, units = "bfloat16, its embedding, norms and biases float32", "its unit buffers"
			}
		} else {
			st.Host.Reference = r.Total()
		}
		refLine = fmt.Sprintf("reference policy: rank 0's share (%s, 1/%d of every unit) and %s", dtype, g.Ranks, units)
		if r.Rotary > 0 {
			refLine += " (and its rotary table)"
		}
	}
	add(refLine, st.Host.Reference, st.Device.Reference)
	if p.cuda() && p.Reference && (g == nil || !g.Planned) {
		add("the reference's host copy while it uploads", 4*P, 0)
	}
	act := fmt.Sprintf("activations of a %d-token micro-batch (checkpointing %s)", p.PassTokens, p.checkpointingWords())
	if !p.cuda() && p.Config.Learner.Precision == backend.BF16 {
		act = fmt.Sprintf("activations of a %d-token micro-batch (checkpointing %s, bfloat16 operands)", p.PassTokens, p.checkpointingWords())
	}
	add(act, st.Host.Activations, st.Device.Activations)
	if g != nil && g.Planned {
		add(fmt.Sprintf("the step's gathered units, unit gradients and kept sums at their peak, on the GPU (%s)", g.Mem[0].PeakWhen()), 0, g.Mem[0].StepBuffers())
	} else if g != nil && g.Zero == 3 {
		add(fmt.Sprintf("the step's gathered layers, layer gradients and kept sums at their peak (%s)", g.Mem[0].PeakWhen()), g.Mem[0].StepBuffers(), 0)
	} else if g != nil && g.Zero == 2 && !g.OnDevice {
		add("rank 0's copy of its share of the weights (float32, updated, then gathered into the model)", g.Mem[0].Weights, 0)
		add(fmt.Sprintf("the step's layer gradients and kept sums at their peak (%s)", g.Mem[0].PeakWhen()), g.Mem[0].StepBuffers(), 0)
	} else if g != nil && g.OnDevice {
		add(fmt.Sprintf("the data-parallel step's gradient buffers on the GPU at their peak (%s)", g.Mem[0].PeakWhen()), 0, g.Mem[0].StepBuffers())
	} else if g != nil {
		add(fmt.Sprintf("the data-parallel step's gradient buffers at their peak (%s)", g.Mem[0].PeakWhen()), g.Mem[0].StepBuffers(), 0)
	} else {
		learn.Lines = append(learn.Lines, p.singleLine())
	}
	learn.Lines = append(learn.Lines, proc)
	if p.cuda() {
		learn.Lines = append(learn.Lines, cudaContext)
	}
	return learn, held
}

// startPhase is the start-up of a group at ZeRO stage 3 on GPUs
// (Group.Planned), as aipo train opens it (trainer.Learner.OnSharded):
// the passes are opened with none of the models' weights on the GPU, the
// group places rank 0's share of the policy from its host copy, then
// (with a KL term) its share of the reference from the reference's host
// copy, so that each GPU holds its shares and the group's unit buffers
// alone (trainer.PlanStartOnDevices), never a whole model. On the host
// each rank holds the policy's weights as loaded, the host's copy of its
// share (learner/trainer/zero3dev.go's zero3.master and moments) and its
// share of the reference (trainer.PlanHostOnDevices), which it took from
// the whole reference before the policy was loaded (the whole reference
// beside the share alone then).
func (p *Plan) startPhase(proc Line) (Phase, error) {
	g, P := p.Group, p.Params
	kl := len(g.Ref) > 0
	bf16 := p.Config.Learner.Precision == backend.BF16
	st, err := trainer.PlanStartOnDevices(p.Model, g.Ranks, kl, bf16)
	if err != nil {
		return Phase{}, fmt.Errorf("plan: %w", err)
	}
	s0 := st[0]
	ph := Phase{Name: "learner start-up at ZeRO stage 3 (the passes opened without weights, each share placed from the host)", Lines: []Line{
		{What: "policy weights as loaded (float32, on the host)", Host: 4 * P},
		{What: fmt.Sprintf("the host's copy of rank 0's share (float32 weights and AdamW moments, 1/%d), from which its GPU's is placed", g.Ranks), Host: g.Host[0].Share()},
		{What: fmt.Sprintf("rank 0's share of the policy placed on its GPU (float32 weights and AdamW moments, 1/%d) and the group's unit buffers", g.Ranks), Device: s0.Policy},
		{What: "the policy passes' rotary table", Device: s0.PolicyRotary},
	}}
	if kl {
		held := "float32"
		if bf16 {
			held = "bfloat16, its embedding, norms and biases float32"
		}
		ph.Lines = append(ph.Lines, Line{What: fmt.Sprintf("reference policy: rank 0's share kept on the host (%s, 1/%d; taken from the whole reference before the policy is loaded), placed on its GPU (%s) with its unit buffers and its rotary table", g.refHostWords(), g.Ranks, held), Host: g.Host[0].Reference, Device: s0.Reference})
	}
	ph.Lines = append(ph.Lines, proc, cudaContext)
	ph.Others = int64(g.perNode()-1) * ph.Host()
	return ph, nil
}

// singleLine is what one process's group of one allocates for its step
// beside the lines above (trainer.EnableSingle, as aipo train opens it
// without --nproc: one virtual shard at stage 1, trainer.SingleShards),
// from the group's own plan: its one shard's gradient reduced and stepped
// in place, no exchange; on a GPU the 256 KiB of zeros an empty shard
// adds. Its moments are the lines above's.
func (p *Plan) singleLine() Line {
	cfg := trainer.DPConfig{Zero: 1, Shards: trainer.SingleShards}
	plan := trainer.PlanDataParallel
	if p.cuda() {
		plan = trainer.PlanDataParallelOnDevices
	}
	line := Line{What: fmt.Sprintf("the group of one's step buffers (%d shard, summed in place; --nproc 1: 8)", trainer.SingleShards)}
	ranks, err := plan(p.Model, 1, cfg)
	if err != nil {
		// The model validated before the step was planned.
		return line
	}
	if p.cuda() {
		line.Device = ranks[0].StepBuffers()
	} else {
		line.Host = ranks[0].StepBuffers()
	}
	return line
}

// cudaContext is the device memory the allocator does not see.
var cudaContext = Line{What: "CUDA context, kernels and cuBLAS workspaces (allowance)", Device: cudaReserve}

// enginePhases are the in-process rollout engine's: loading checkpoint k
// beside the learner's kept state held, and decoding with its attention
// caches (on the CPU the host model, on a device its upload). The engine
// decodes in the precision policy.dtype resolves to
// (inproc.EngineDType, as aipo train's engine resolves it): in bfloat16
// the CPU packs a bfloat16 copy before it drops the float32 weights, then
// holds that copy alone, a device uploads bfloat16 weights, and the
// caches take 2 bytes a value.
func (p *Plan) enginePhases(b backend.Backend, held, proc Line) (load, roll Phase) {
	cfg, mc, P := p.Config, p.Model, p.Params
	// (At stage 3 on GPUs nothing of the step stays on the GPU between
	// steps: the passes are parked after every step, the rank's share
	// brought to the host, in held.)
	if !cfg.InProcessPolicy() {
		// The policy is sampled from policy.endpoint: aipo train loads
		// no engine; between steps it writes checkpoint k, whose
		// float32 weights it encodes from the model it holds.
		load = Phase{Name: "checkpoint k written (the policy served at policy.endpoint)", Lines: []Line{held, proc}}
		roll = Phase{Name: "rollout (policy.endpoint " + cfg.Policy.Endpoint + ": no engine in aipo train)", Lines: []Line{held, proc}}
		if p.cuda() {
			load.Lines = append(load.Lines, cudaContext)
			roll.Lines = append(roll.Lines, cudaContext)
		}
		return load, roll
	}
	dtype := inproc.EngineDType(cfg.Policy.DType, checkpoint.ModelDType(mc), mc.HiddenSize, !p.cuda())
	bf16 := dtype == inproc.DTypeBF16
	engineHost, engineDev := b.DecoderMemory(mc, bf16)
	load = Phase{Name: "rollout engine load", Lines: []Line{held,
		{What: "checkpoint k's weights decoded (float32)", Host: 4 * P},
		{What: "the engine's model built from them (float32)", Host: 4 * P}}}
	if bf16 && !p.cuda() {
		load.Lines = append(load.Lines, Line{What: "its bfloat16 copy, packed before the float32 weights go (policy.dtype)", Host: engineHost})
	}
	valueBytes := int64(4)
	if bf16 {
		valueBytes = 2
	}
	bpt := 2 * valueBytes * int64(mc.NumHiddenLayers*mc.NumKeyValueHeads*mc.Head())
	seqs := min(inproc.TrainMaxBatch, cfg.Rollout.MaxInFlight)
	// A trajectory waiting for a collaborator's answer has its cache in the
	// session cache, not in the batch: both together hold at most the
	// trajectories in flight, and the session cache its bound.
	live := int64(seqs) * int64(p.SeqTokens) * bpt
	kv := live + min(live, sessionCacheBytes(bpt))
	roll = Phase{Name: "rollout (in-process engine)", Lines: []Line{held}}
	kvWhat := fmt.Sprintf("attention caches: %d sequences x %d positions x %d bytes, and the session cache", seqs, p.SeqTokens, bpt)
	if p.cuda() {
		load.Lines = append(load.Lines, Line{What: "the engine's weights on the device (" + dtype + ")", Device: engineDev}, cudaContext)
		chunk := int64(64 << 20) // the decoder's logits chunk
		roll.Lines = append(roll.Lines, Line{What: "the engine's weights and logits chunk (" + dtype + ")", Device: engineDev + chunk},
			Line{What: kvWhat, Device: kv}, cudaContext)
	} else {
		roll.Lines = append(roll.Lines, Line{What: "the engine's model (" + dtype + ")", Host: engineHost}, Line{What: kvWhat, Host: kv})
	}
	load.Lines = append(load.Lines, proc)
	roll.Lines = append(roll.Lines, proc)
	return load, roll
}

// checkpointingWords is onOff(p.Checkpointing), and where the kept
// layer inputs go when they are offloaded.
func (p *Plan) checkpointingWords() string {
	if p.Checkpointing && p.Config.Learner.ActivationCheckpointing == trainer.CheckpointingOffload {
		return "on, each layer's kept input in host memory, two of them on the GPU"
	}
	return onOff(p.Checkpointing)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// planDisk sizes the checkpoints and what retention keeps of them.
func planDisk(cfg runconfig.Config, mc model.Config, P int64) Disk {
	dt := checkpoint.ModelDType(mc)
	var d Disk
	d.Serving = P * int64(dt.Size())
	masters := int64(0)
	if dt != checkpoint.F32 {
		masters = 4 * P
	}
	d.Full = d.Serving + masters + 8*P
	size := func(k int64) int64 {
		switch {
		case k == 0:
			return d.Serving + masters // the initial policy: no moments yet
		case cfg.Checkpoint.FullAt(k, cfg.Run.Steps):
			return d.Full
		}
		return d.Serving
	}
	var have []int64
	for k := int64(0); k <= cfg.Run.Steps; k++ {
		have = append(have, k)
		var held int64
		for _, s := range have {
			held += size(s)
		}
		if held > d.MostHeld {
			d.MostHeld, d.MostCount = held, len(have)
		}
		keep := cfg.Checkpoint.Retained(have, func(s int64) bool { return cfg.Checkpoint.FullAt(s, cfg.Run.Steps) }, func(int64) bool { return false })
		have = slices.DeleteFunc(have, func(s int64) bool { return !keep[s] })
	}
	d.Final = have
	return d
}

// hostCapacity is this machine's memory (the CPU backend's device): what
// is available now plus what this process holds (the plan counts it).
func hostCapacity(base int64) Capacity {
	devs, err := backend.DevicesOf(backend.CPUName)
	if err != nil {
		return Capacity{Name: "this machine", Note: "not known: " + err.Error()}
	}
	h := devs[0]
	c := Capacity{Name: "this machine", Bytes: h.FreeBytes + base,
		Note: fmt.Sprintf("%s available now of %s (%s), with this process's %s", fmtBytes(h.FreeBytes), fmtBytes(h.TotalBytes), h.MemorySource, fmtBytes(base))}
	return c
}

// deviceCapacity is the named device's memory, or that of the first
// device of the backend called backendName (the one it opens).
func deviceCapacity(name, backendName string) (Capacity, error) {
	if name != "" {
		for _, d := range Devices {
			if strings.EqualFold(d.Name, name) {
				return Capacity{Name: d.Label, Bytes: d.Bytes, Note: "--device " + d.Name}, nil
			}
		}
		return Capacity{}, fmt.Errorf("plan: --device %s is not one this plan knows: use %s", name, strings.Join(DeviceNames(), ", "))
	}
	devs, err := backend.DevicesOf(backendName)
	if len(devs) == 0 {
		if err == nil {
			err = fmt.Errorf("backend %s lists no device", backendName)
		}
		short, _, _ := strings.Cut(err.Error(), "; tried")
		return Capacity{Name: "GPU 0", Note: "not found (" + short + "); name one with --device " + strings.Join(DeviceNames(), "|")}, nil
	}
	d := devs[0]
	return Capacity{Name: d.Name, Bytes: d.TotalBytes, Note: fmt.Sprintf("GPU %s, %s free now", d.ID, fmtBytes(d.FreeBytes))}, nil
}

// phaseFits reports whether phase i fits the known capacities.
func (p Plan) phaseFits(i int) bool {
	ph := p.Phases[i]
	return (p.Host.Bytes == 0 || ph.Host() <= p.Host.Bytes) && (p.Device.Bytes == 0 || ph.Device() <= p.Device.Bytes)
}

// The phases, in Plan.Phases order (phaseStart only for a group at
// stage 3 on GPUs: the passes opened without weights; a LoRA run's passes
// open with the adapter alone and the base's share placed from the host,
// less than its learner step holds, trainer.PlanLoRAStartOnDevices).
const (
	phaseLearn = iota
	phaseLoad
	phaseRollout
	phaseStart
)

// fixes tries the changes that lower the peaks of the phases that do not
// fit and reports each with the peaks of the phases it is for: the
// learner step's (activation checkpointing, the micro-batch, the GEMM
// precision, the reference, the response length) and the rollout's (the
// trajectories in flight).
func fixes(cfg runconfig.Config, mc model.Config, o Options, base int64, host, dev Capacity) []Fix {
	fx := &fixer{mc: mc, o: o, base: base, host: host, dev: dev}
	p0, ok := fx.plan(cfg)
	if !ok {
		return nil
	}
	if !p0.phaseFits(phaseLearn) {
		fx.learnerFixes(cfg, p0)
	}
	if !p0.phaseFits(phaseRollout) || !p0.phaseFits(phaseLoad) {
		if n := fx.largest(cfg, 1, cfg.Rollout.MaxInFlight-1, func(c *runconfig.Config, n int) { c.Rollout.MaxInFlight = n }, phaseLoad, phaseRollout); n > 0 {
			c := cfg
			c.Rollout.MaxInFlight = n
			fx.report(fmt.Sprintf("rollout.max_in_flight: %d", n), c, phaseRollout, phaseLoad)
		}
	}
	return fx.out
}

// fixer plans changed configurations of one model on one machine and
// collects the changes that make a phase fit.
type fixer struct {
	mc        model.Config
	o         Options
	base      int64
	host, dev Capacity
	out       []Fix
}

// plan is c's plan on the fixer's machine; false when c cannot be planned.
func (fx *fixer) plan(c runconfig.Config) (Plan, bool) {
	p, err := planFor(c, fx.mc, fx.o, fx.base)
	p.Host, p.Device = fx.host, fx.dev
	return p, err == nil
}

// report adds change, which turns the configuration into c, with the
// peaks of the given phases and whether they all fit.
func (fx *fixer) report(change string, c runconfig.Config, phases ...int) {
	p, ok := fx.plan(c)
	if !ok {
		return
	}
	f := Fix{Change: change, Fits: true, Phase: p.Phases[phases[0]].Name}
	for _, i := range phases {
		f.Host, f.Device = max(f.Host, p.Phases[i].Host()), max(f.Device, p.Phases[i].Device())
		f.Fits = f.Fits && p.phaseFits(i)
	}
	fx.out = append(fx.out, f)
}

// largest is the largest n in [lo, hi] for which set(c, n) makes the
// phases fit, 0 when lo does not.
func (fx *fixer) largest(c0 runconfig.Config, lo, hi int, set func(*runconfig.Config, int), phases ...int) int {
	fits := func(n int) bool {
		c := c0
		set(&c, n)
		p, ok := fx.plan(c)
		for _, i := range phases {
			ok = ok && p.phaseFits(i)
		}
		return ok
	}
	if hi < lo || !fits(lo) {
		return 0
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// learnerFixes are the changes that shrink the learner step of cfg (plan
// p0): each cheap one alone, then together, then with the KL term off,
// then with the longest response budget that fits.
func (fx *fixer) learnerFixes(cfg runconfig.Config, p0 Plan) {
	cheap := cfg
	var names []string
	one := func(change string, mut func(*runconfig.Config)) {
		c := cfg
		mut(&c)
		fx.report(change, c, phaseLearn)
		mut(&cheap)
		names = append(names, change)
	}
	if !p0.Checkpointing {
		one("learner.activation_checkpointing: on", func(c *runconfig.Config) { c.Learner.ActivationCheckpointing = trainer.CheckpointingOn })
	}
	if p0.cuda() && cfg.Learner.ActivationCheckpointing != trainer.CheckpointingOffload {
		one("learner.activation_checkpointing: offload", func(c *runconfig.Config) { c.Learner.ActivationCheckpointing = trainer.CheckpointingOffload })
	}
	if p0.PassTokens > p0.SeqTokens {
		n := p0.SeqTokens
		one(fmt.Sprintf("learner.micro_batch_tokens: %d", n), func(c *runconfig.Config) { c.Learner.MicroBatchTokens = n })
	}
	if cfg.Learner.Precision == backend.BF16 {
		one("learner.precision: fp32", func(c *runconfig.Config) { c.Learner.Precision = backend.FP32 })
	}
	if len(names) > 1 {
		fx.report(strings.Join(names, ", "), cheap, phaseLearn)
	}
	if cfg.Learner.Loss.KLCoef != 0 {
		c := cheap
		c.Learner.Loss.KLCoef = 0
		fx.report(strings.Join(append(slices.Clone(names), "learner.loss.kl_coef: 0"), ", "), c, phaseLearn)
	}
	if n := fx.largest(cheap, 1, cfg.Policy.MaxResponseTokens-1, func(c *runconfig.Config, n int) { c.Policy.MaxResponseTokens = n }, phaseLearn); n > 0 {
		c := cheap
		c.Policy.MaxResponseTokens = n
		fx.report(strings.Join(append(slices.Clone(names), fmt.Sprintf("policy.max_response_tokens: %d", n)), ", "), c, phaseLearn)
	}
}

// String is the plan as aipo plan prints it.
func (p Plan) String() string {
	var b strings.Builder
	mc := p.Model
	fmt.Fprintf(&b, "run %s: %s, %s parameters (hidden %d, %d layers, %d/%d heads, vocab %d, %s), from %s\n",
		p.Config.Run.Name, mc.ModelType, fmtCount(p.Params), mc.HiddenSize, mc.NumHiddenLayers, mc.NumAttentionHeads, mc.NumKeyValueHeads,
		mc.VocabSize, checkpoint.ModelDType(mc).TorchName(), p.ModelFrom)
	fmt.Fprintf(&b, "sequences of up to %d tokens (%d prompt + %d response), micro-batches of up to %d tokens; learner.backend %s, precision %s, activation checkpointing %s, reference %s\n",
		p.SeqTokens, p.PromptTokens, p.ResponseTokens, p.PassTokens, p.Config.Learner.Backend, p.Config.Learner.Precision, p.checkpointingWords(), yesNo(p.Reference))
	if p.Group != nil {
		b.WriteString(p.Group.describe(p))
	}
	dev := p.cuda()
	row := func(what string, host, device int64, dash bool) {
		f := fmtBytes
		if dash {
			f = fmtOrDash
		}
		fmt.Fprintf(&b, "  %-76s %12s", what, f(host))
		if dev {
			fmt.Fprintf(&b, " %12s", f(device))
		}
		b.WriteString("\n")
	}
	for _, ph := range p.Phases {
		fmt.Fprintf(&b, "\n%-78s %12s", ph.Name, "host")
		if dev {
			fmt.Fprintf(&b, " %12s", "device")
		}
		b.WriteString("\n")
		for _, l := range ph.Lines {
			row(l.What, l.Host, l.Device, true)
		}
		if g := p.Group; g != nil {
			row("rank 0", ph.Host()-ph.Others, ph.Device(), false)
			others, what := g.others()+" on the same host (each its own process)", "total: this machine"
			if dev {
				others, what = g.others()+" on the same host (each its own process and GPU)", "total: the node's host, one GPU (rank 0's)"
			}
			row(others, ph.Others, 0, true)
			row(what, ph.Host(), ph.Device(), false)
			continue
		}
		row("total", ph.Host(), ph.Device(), false)
	}
	h, d := p.Peaks()
	b.WriteString("\n")
	b.WriteString(verdict("host", h, p.Host))
	if dev {
		b.WriteString(verdict("device", d, p.Device))
	}
	dk := p.Disk
	if p.LoRA != nil {
		b.WriteString(p.loraSummary())
	} else {
		fmt.Fprintf(&b, "checkpoints: %s of serving weights every step, %s with the full training state (every %d steps and the last); the run directory holds at most %d checkpoints, %s; at the end %v (checkpoint.keep_last %d, keep_every %d)\n",
			fmtBytes(dk.Serving), fmtBytes(dk.Full), p.Config.Checkpoint.SaveEvery, dk.MostCount, fmtBytes(dk.MostHeld), dk.Final, p.Config.Checkpoint.KeepLast, p.Config.Checkpoint.KeepEvery)
	}
	if !p.Fits() {
		b.WriteString("\ndoes not fit. What to change:\n")
		for _, f := range p.Fixes {
			fmt.Fprintf(&b, "  %s: %s: host %s", f.Phase, f.Change, fmtBytes(f.Host))
			if dev {
				fmt.Fprintf(&b, ", device %s", fmtBytes(f.Device))
			}
			if f.Fits {
				b.WriteString(": fits\n")
			} else {
				b.WriteString(": does not fit\n")
			}
		}
		b.WriteString("  or " + p.moreMemory() + "\n")
	}
	return b.String()
}

func verdict(place string, need int64, c Capacity) string {
	switch {
	case c.Bytes == 0:
		return fmt.Sprintf("%s peak %s; %s: %s, not checked\n", place, fmtBytes(need), c.Name, c.Note)
	case need <= c.Bytes:
		return fmt.Sprintf("%s peak %s of %s (%s; %s): fits, %s to spare\n", place, fmtBytes(need), fmtBytes(c.Bytes), c.Name, c.Note, fmtBytes(c.Bytes-need))
	}
	return fmt.Sprintf("%s peak %s of %s (%s; %s): DOES NOT FIT, %s short\n", place, fmtBytes(need), fmtBytes(c.Bytes), c.Name, c.Note, fmtBytes(need-c.Bytes))
}

func yesNo(b bool) string {
	if b {
		return "yes (learner.loss.kl_coef)"
	}
	return "no"
}

// ErrModelUnknown is wrapped by Make's error when no model is given
// and the run has none yet.
var ErrModelUnknown = errors.New("the model is not known")

// Summary is the plan in one line: the peaks and whether they fit.
func (p Plan) Summary() string {
	h, d := p.Peaks()
	part := func(place string, need int64, c Capacity) string {
		if c.Bytes == 0 {
			return fmt.Sprintf("%s peak %s (%s not known)", place, fmtBytes(need), c.Name)
		}
		return fmt.Sprintf("%s peak %s of %s (%s)", place, fmtBytes(need), fmtBytes(c.Bytes), c.Name)
	}
	s := fmt.Sprintf("%s parameters, sequences of %d tokens: %s", fmtCount(p.Params), p.SeqTokens, part("host", h, p.Host))
	if g := p.Group; g != nil {
		s = fmt.Sprintf("%d ranks (ZeRO-%d), ", g.Ranks, g.Zero) + s
	}
	if p.cuda() {
		s += ", " + part("device", d, p.Device)
	}
	if p.Fits() {
		return s + ": fits"
	}
	return s + ": does not fit"
}

// ErrDoesNotFit is wrapped by Refusal's error.
var ErrDoesNotFit = errors.New("the run does not fit in memory")

// Refusal is nil when the plan fits, else the error aipo train stops
// with: the peaks, the capacities and the changes that fit.
func (p Plan) Refusal() error {
	if p.Fits() {
		return nil
	}
	h, d := p.Peaks()
	var short []string
	if p.Host.Bytes > 0 && h > p.Host.Bytes {
		short = append(short, fmt.Sprintf("%s of host memory, %s has %s", fmtBytes(h), p.Host.Name, fmtBytes(p.Host.Bytes)))
	}
	if p.Device.Bytes > 0 && d > p.Device.Bytes {
		short = append(short, fmt.Sprintf("%s of device memory, %s has %s", fmtBytes(d), p.Device.Name, fmtBytes(p.Device.Bytes)))
	}
	over := func(ph Phase) int64 {
		var o int64
		if p.Host.Bytes > 0 {
			o = ph.Host() - p.Host.Bytes
		}
		if p.Device.Bytes > 0 {
			o = max(o, ph.Device()-p.Device.Bytes)
		}
		return o
	}
	worst := p.Phases[0]
	for _, ph := range p.Phases {
		if over(ph) > over(worst) {
			worst = ph
		}
	}
	var parts []string
	for _, l := range worst.Lines {
		if v := max(l.Host, l.Device); v > 0 {
			parts = append(parts, l.What+" "+fmtBytes(v))
		}
	}
	if worst.Others > 0 {
		parts = append(parts, p.Group.others()+" "+fmtBytes(worst.Others))
	}
	var fix []string
	for _, f := range p.Fixes {
		if f.Fits {
			fix = append(fix, f.Change)
		}
	}
	how := p.moreMemory()
	if len(fix) > 0 {
		how = "set " + strings.Join(fix, ", or ")
	}
	return fmt.Errorf("%w: it needs %s (%s: %s); %s; aipo plan --config <run.yaml> prints the whole plan, --ignore-plan runs it anyway",
		ErrDoesNotFit, strings.Join(short, " and "), worst.Name, strings.Join(parts, ", "), how)
}

func fmtCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
	return strconv.FormatInt(n, 10)
}

func fmtOrDash(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmtBytes(n)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// selfRSS is this process's resident memory now (/proc/self/status
// VmRSS), 0 where that is not known.
func selfRSS() int64 {
	n, _ := meminfo.Status(0, "VmRSS")
	return n
}

// moreMemory is the plan's advice beyond the configuration's settings.
func (p Plan) moreMemory() string {
	g := p.Group
	switch {
	case p.LoRA != nil:
		return "a machine with more memory (docs/lora.md)"
	case !p.cuda() && g != nil:
		return "a machine with more memory (the ranks of aipo train --nproc share it; more ranks shard the moments alone), or learner.backend cuda on a GPU machine (aipo plan --device NAME plans for one)"
	case !p.cuda():
		return "a machine with more memory, or learner.backend cuda on a GPU machine (aipo plan --device NAME plans for one)"
	case g != nil && g.Planned:
		return "more GPUs (--nproc): each holds 1/N of the weights, moments and reference at stage 3 (built on GPUs in float32 and in bfloat16), but the whole activations of its micro-batch"
	case g != nil:
		return "more GPUs (--nproc) shard only the moments; each GPU holds the whole weights and gradients at stages 1 and 2 (stage 3, --zero 3, shards them and the reference too, in float32)"
	}
	return "more devices: a group of GPUs (aipo train --nproc N) shards the AdamW moments across them, each GPU keeping 8 bytes a parameter over N (aipo plan --nproc N plans it; docs/scaling.md)"
}
