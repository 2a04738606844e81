package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/peft"
)

// LoRA training. A policy with a LoRA adapter attached (model.AttachAdapter)
// trains the adapter alone on its frozen base: the optimiser's parameters
// are the adapter's matrices (backend.OptimParams), so its AdamW state is
// theirs alone; a data-parallel group reduces their gradients and shards
// their state as it does a whole model's (stage 1, whose bits are the same
// at every group size); and the reference of the KL term is the policy
// with its adapter switched off, no second model.

// loraRef is the reference passes of a LoRA policy: its base, the adapter
// off for each pass, scored where the policy's passes run (c: the host
// model's own, or a device's backend.AdapterTrainer, which follows the
// host model's switch).
type loraRef struct {
	m *model.Model
	c Compute
}

func (r loraRef) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	if loss != nil {
		return nil, errors.New("trainer: the LoRA policy's base is a frozen reference: it is scored, never differentiated")
	}
	r.m.SetAdapterOn(false)
	defer r.m.SetAdapterOn(true)
	return r.c.Run(b, nil)
}

func (loraRef) ZeroGrads() error { return nil }
func (loraRef) Step(*optim.AdamW) (float64, error) {
	return 0, errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) ReadOptimizer(*optim.AdamW, io.Reader) error {
	return errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) WriteOptimizer(*optim.AdamW, io.Writer) error {
	return errors.New("trainer: the LoRA policy's base is frozen")
}
func (loraRef) SyncParams() error     { return nil }
func (loraRef) SetCheckpointing(bool) {}
func (loraRef) Close() error          { return nil }

var _ backend.Compute = loraRef{}

// loraBase is the reference passes of a LoRA policy, nil for a policy
// without an adapter.
func (l *Learner) loraBase() Compute {
	if l.Policy == nil || !l.Policy.HasAdapter() {
		return nil
	}
	return loraRef{l.Policy, l.policy()}
}

// keyDropout keys the adapter's dropout masks of the passes that follow
// by the optimiser's step count (every rank has the same).
func (l *Learner) keyDropout() {
	if l.Policy != nil {
		l.Policy.SetAdapterStep(uint64(l.Opt.Steps()))
	}
}

// flatBuffers are the policy's gradient and parameter buffers as the
// optimiser's parameters lie in them: the adapter's of a LoRA policy
// (model.AdapterGradData, AdapterParamData), else the model's.
func flatBuffers(m *model.Model) (grads, params []float32) {
	if m.HasAdapter() {
		return m.AdapterGradData(), m.AdapterParamData()
	}
	return m.GradData(), m.ParamData()
}

// checkLoRAGroup refuses the ZeRO stages a LoRA policy's group does not
// run: stage 2, which shards the gradients of what the run trains, would
// hold nothing less than stage 1 (the adapter's gradients are reduced
// whole, the base has none); stage 3 with the passes on a device (dev)
// shards the frozen base on the devices, over the device communicator
// (devComm), which the passes must be able to do (backend.BaseSharded).
func checkLoRAGroup(m *model.Model, zero int, dev backend.HostReduced, devComm bool) error {
	if m == nil || !m.HasAdapter() {
		return nil
	}
	switch {
	case zero == 2:
		return errors.New("trainer: ZeRO stage 2 shards the gradients of the weights a run trains, but a LoRA run trains the adapter alone, whose gradients stage 1 reduces whole (a few megabytes) and whose AdamW state it shards, and the frozen base has no gradients: stage 2 would hold nothing less than stage 1; set learner.zero: 1, or 3 to shard the frozen base as well")
	case zero == 3 && dev != nil:
		if _, ok := dev.(backend.BaseSharded); !ok {
			return fmt.Errorf("trainer: the passes of this device (%T) cannot shard a LoRA policy's frozen base (ZeRO stage 3 on the devices): set learner.zero: 1 (each device then holds the whole base)", dev)
		}
		if !devComm {
			return errors.New("trainer: a LoRA run at ZeRO stage 3 with the passes on a device gathers its frozen base over a device communicator: give DPConfig.DeviceComm (NCCL)")
		}
	}
	return nil
}

// LoRA at ZeRO stage 3. The group reduces the adapter's gradients and
// shards its AdamW state as stage 1 does (dp.go: the same shards, passes,
// tree and bits at every group size), and the frozen base is sharded as
// stage 3 shards a frozen reference (zero3ref.go: newZero3Frozen, 1/N of
// every unit a rank, in float32): every pass over the policy, training or
// scoring, with the adapter on or off (the KL term's reference), gathers
// the base a unit at a time from the ranks, the next while it computes
// the current, and hands over no gradient (model.FrozenUnitPlan). Stage 1
// lets each rank run its own number of micro-batches; the gathers are
// collective, so every rank runs as many passes as the rank with the
// most, the passes it lacks as shadows (their gathers alone). The base
// stays sharded between steps: nothing reads it whole (checkpoints and
// the weight sync carry the adapter alone).
//
// With the passes on a device (backend.BaseSharded) the base is sharded
// there, with the same layout: each device keeps its elements of every
// unit, the passes gather each unit over the device communicator, and
// the adapter's gradients are reduced and its moments stepped by the
// stage-1 device group (dpdevice.go), so the update is the device stage
// 1's bits at every group size. Its passes are reopened between steps,
// opened without the base (Learner.OnSharded: the adapter alone on the
// device), and each new one has its share of the base placed from the
// host model before its first pass (backend.BaseSharded), so that no
// device ever holds the whole base.

// shardBase makes the LoRA policy's frozen base this rank's share, if it
// is not already (the policy, loaded anew, holds it whole).
func (l *Learner) shardBase() error {
	dp := l.DP
	if l.Policy.Sharded() {
		if dp.baseOf != l.Policy {
			return errors.New("trainer: the LoRA policy's base is sharded by another group: load it anew")
		}
		return nil
	}
	if dev, err := l.hostReduced(); err != nil {
		return err
	} else if dev != nil {
		return l.shardBaseDevice(dev)
	}
	z, err := newZero3Frozen(l.Policy, dp.Comm.Size(), dp.Comm.Rank())
	if err != nil {
		return fmt.Errorf("trainer: sharding the LoRA policy's base: %w", err)
	}
	if err := l.Policy.ShardWeights(z); err != nil {
		return fmt.Errorf("trainer: sharding the LoRA policy's base: %w", err)
	}
	dp.base, dp.baseOf = z, l.Policy
	debug.FreeOSMemory() // the whole base, before the step's buffers
	return nil
}

// shardBaseDevice makes the LoRA policy's passes on the device sharded
// (DataParallel's baseDev), if these passes are not already: each rank
// keeps its elements of every unit of the base on its device, laid out
// as the host's share would be (newZero3Frozen), and the whole base there
// goes. dev is the passes (l.PolicyCompute).
func (l *Learner) shardBaseDevice(dev backend.HostReduced) error {
	dp := l.DP
	if dp.baseDev != nil && dp.baseDevOf == l.PolicyCompute {
		return nil
	}
	bs, ok := dev.(backend.BaseSharded)
	if !ok || dp.dev.comm == nil {
		return checkLoRAGroup(l.Policy, 3, dev, dp.dev.comm != nil)
	}
	z := zero3Layout(l.Policy.Config(), dp.Comm.Size())
	lay := backend.ShardLayout{Parts: z.own}
	for _, u := range z.units {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
	}
	g, err := bs.ShardBase(dp.dev.comm, lay)
	if err != nil {
		return fmt.Errorf("trainer: sharding the LoRA policy's base on the devices: %w", err)
	}
	dp.baseDev, dp.baseDevOf = g, l.PolicyCompute
	return nil
}

// passCounts is, for each rank, the passes of a mini-batch its shards
// run (counts[s][b]: shard s's micro-batch b has a token to train when
// not 0; each such one is a pass of shard s's owner), and the most any
// rank runs.
func (dp *DataParallel) passCounts(counts [][]float64) (passes []int, most int) {
	n, v := dp.Comm.Size(), dp.Shards
	passes = make([]int, n)
	for s := range v {
		for _, x := range counts[s] {
			if x != 0 {
				passes[owner(s, v, n)]++
			}
		}
	}
	return passes, slices.Max(passes)
}

// basePassesDevice is basePasses on the devices: c's passes each between
// the device group's BeginScore and EndPass, and the shadows (a training
// pass's gathers, model.FrozenUnitPlan) that bring this rank to the most
// passes any rank runs.
func (l *Learner) basePassesDevice(ctx context.Context, c Compute, counts [][]float64) (Compute, func() error) {
	dp := l.DP
	passes, most := dp.passCounts(counts)
	g := dp.baseDev
	return devFedPasses{Compute: c, ctx: ctx, dp: dp, g: g}, func() error {
		for range most - passes[dp.Comm.Rank()] {
			g.BeginScore(ctx)
			if err := g.EndPass(g.Shadow(true)); err != nil {
				dp.Comm.Abort(err)
				return err
			}
		}
		return nil
	}
}

// devFedPasses runs the passes of a LoRA policy whose base is sharded on
// the devices (dp.baseDev), each pass's gathers begun and ended with it.
type devFedPasses struct {
	Compute
	ctx context.Context
	dp  *DataParallel
	g   backend.ShardedScorer
}

func (f devFedPasses) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	f.g.BeginScore(f.ctx)
	out, err := f.Compute.Run(b, loss)
	if err := f.g.EndPass(err); err != nil {
		// The others wait for this rank's gathers: tell them.
		f.dp.Comm.Abort(err)
		return nil, err
	}
	return out, nil
}

// basePasses is c, the LoRA policy's passes, each over the sharded base
// (fedPasses), and the function that runs, after this rank's passes of a
// mini-batch, the shadow passes that bring it to the most passes any
// rank runs (counts[s][b]: shard s's micro-batch b has a token to train
// when not 0; each such one is a pass of shard s's owner).
func (l *Learner) basePasses(ctx context.Context, c Compute, counts [][]float64) (Compute, func() error) {
	dp := l.DP
	rank := dp.Comm.Rank()
	passes, most := dp.passCounts(counts)
	f := fedPasses{Compute: c, ctx: ctx, dp: dp, m: l.Policy}
	return f, func() error {
		for range most - passes[rank] {
			if err := dp.base.beginPass(ctx, dp.Comm, l.Policy.Config(), true, true, nil, nil, false).finish(nil); err != nil {
				return err
			}
		}
		dp.Sent += dp.base.sent.Swap(0)
		return nil
	}
}

// fedPasses runs the passes of a LoRA policy whose base is sharded
// (dp.base) with the feed of each: the base's units gathered as the pass
// reads them.
type fedPasses struct {
	Compute
	ctx context.Context
	dp  *DataParallel
	m   *model.Model
}

func (f fedPasses) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	feed := f.dp.base.beginPass(f.ctx, f.dp.Comm, f.m.Config(), loss != nil, false, nil, nil, false)
	out, err := f.Compute.Run(b, loss)
	f.m.EndShardedPass()
	if err := feed.finish(err); err != nil {
		// The others wait for this rank's gathers: tell them.
		f.dp.Comm.Abort(err)
		return nil, err
	}
	return out, nil
}

// BaseMemory is what this rank holds of a LoRA policy's sharded base
// (stage 3; zero otherwise): its share and the most it held at once (the
// share and the units its passes gathered), in bytes.
func (dp *DataParallel) BaseMemory() (share, peak int64) {
	if dp.base == nil {
		return 0, 0
	}
	return 4 * int64(len(dp.base.master)), dp.base.mem.peak.Load()
}

// LoadAdapterPolicy builds the policy of the committed LoRA checkpoint ck
// (read from dir): its base, loaded from the directory the adapter's
// configuration names (base_model_name_or_path), with the adapter
// attached, its dropout keyed by seed.
func LoadAdapterPolicy(ctx context.Context, dir string, ck checkpoint.Checkpoint, seed uint64) (*model.Model, checkpoint.Checkpoint, error) {
	ad, err := peft.FromCheckpoint(dir, ck.Adapter)
	if err != nil {
		return nil, checkpoint.Checkpoint{}, err
	}
	if ad.Config.BaseModel == "" {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: %s names no base model (base_model_name_or_path)", dir)
	}
	m, bck, err := LoadModel(ctx, ad.Config.BaseModel)
	if err != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: the base of the LoRA checkpoint %s: %w", dir, err)
	}
	if bck.Adapter != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: the base of %s, %s, is itself an adapter", dir, ad.Config.BaseModel)
	}
	if err := m.AttachAdapter(ad, seed); err != nil {
		return nil, checkpoint.Checkpoint{}, fmt.Errorf("trainer: %s on %s: %w", dir, ad.Config.BaseModel, err)
	}
	ck.Config = m.Config()
	if len(ck.Tokenizer) == 0 {
		ck.Tokenizer = bck.Tokenizer
	}
	return m, ck, nil
}
