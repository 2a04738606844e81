package backend

import (
	"context"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// DeviceReduced is a device's Compute whose data-parallel group reduces
// the gradients on the devices, over a communicator of device memory
// (learner/collective/nccl), and keeps and steps each rank's share of the
// optimiser state there: no gradient comes to the host. The trainer
// drives it through the DeviceGroup it opens; the sums are those of the
// host group's fixed tree (learner/trainer's DataParallel), so a step is
// the same bits at every group size that divides the virtual shards.
type DeviceReduced interface {
	HostReduced
	// DeviceGroup opens the passes' side of rank comm.Rank() of a group
	// in which rank r owns the flat parameter elements [start[r],
	// start[r+1]) (ParamData's layout).
	DeviceGroup(comm collective.Comm, start []int) (DeviceGroup, error)
}

// DeviceGroup is a rank's part of a data-parallel group on the devices.
type DeviceGroup interface {
	// PushShard adds the gradients accumulated since ZeroGrads (or, with
	// empty, zeros: a shard without a token to train) as the next leaf of
	// the rank's sum of its shards, a binary tree in shard order whose
	// two sums of equally many leaves are added as soon as both exist.
	PushShard(empty bool) error
	// Reduce ends the rank's tree (folding what is left from the right),
	// sends every rank its elements of the partial sum and adds the
	// ranks' partials of this rank's elements in rank order in the same
	// tree, on the device. With nothing pushed since the last Reduce, the
	// gradients accumulated since ZeroGrads are the partial sum, read
	// where the passes wrote them (a rank's one shard: no copy); at one
	// rank the reduced gradient is the partial sum itself, which Step
	// reads before the next passes write the gradients again.
	Reduce(ctx context.Context) error
	// SumSquares returns the sum of squares (float64) of the reduced
	// gradient over each run [runs[i][0], runs[i][1]) of flat elements,
	// all within the rank's: values that do not depend on the group's
	// size, which the group adds in run order into the global norm.
	SumSquares(runs [][2]int) ([]float64, error)
	// Step applies AdamW step number steps+1 of cfg to the rank's
	// elements from the reduced gradient, clipped by the global norm
	// sqrt(sumSquares) (nothing changes when it is not finite), then
	// gathers every rank's updated elements into every rank's parameters
	// (and their bfloat16 copy).
	Step(ctx context.Context, cfg optim.Config, steps int64, sumSquares float64) error
	// Moments copies the rank's moments, first (0) or second (1), from
	// flat element lo on, into vals (put false) or from vals (put true).
	Moments(moment, lo int, vals []float32, put bool) error
	// Close frees what the group holds on the device.
	Close() error
}

// DeviceSharded is a device's Compute that runs ZeRO stage 3 on the
// devices: the model holds no whole weights or gradients there; each
// rank keeps, on its device, the float32 weights, the reduced gradient
// and the AdamW moments of the elements it owns, and the passes gather
// each unit's weights over the device communicator just before they read
// it and send each unit's gradient to its owners as they end it, in the
// order of model.UnitPlan (learner/trainer's stage-3 schedule: the slots
// and rounds whose sums are the host group's fixed tree).
type DeviceSharded interface {
	DeviceReduced
	// ShardedGroup makes the passes' model sharded and opens rank
	// comm.Rank()'s side of the group over layout, its owned weights
	// taken from master (the rank's runs of every unit, in unit order).
	ShardedGroup(comm collective.Comm, layout ShardLayout, master []float32) (ShardedGroup, error)
}

// ShardedOpener is a Device that opens the passes of a model that ZeRO
// stage 3 on the devices shards next without its whole weights: the
// device holds nothing of the model but what needs no weights (its
// rotary table) until the group places the rank's share, a unit at a
// time (DeviceSharded.ShardedGroup from the trainer's share of the
// policy, FrozenSharded.ShardFrozen from the frozen model's weights on
// the host, which the passes keep until then, or
// FrozenShareSharded.ShardFrozenShare from the rank's share the caller
// keeps on the host, the model then giving its shape alone). No device
// ever holds the
// whole policy, its gradients or the whole reference, even for a moment
// at start-up. Until their group opens, the passes refuse to run.
type ShardedOpener interface {
	// TrainSharded is Train for a policy that a stage-3 group shards
	// (DeviceSharded.ShardedGroup) before any pass; for a policy with a
	// LoRA adapter attached, the adapter and its gradients alone are
	// placed, and the group shards the frozen base
	// (BaseSharded.ShardBase, from m's weights) before any pass.
	TrainSharded(m *model.Model, precision string) (Compute, error)
	// EvalSharded is Eval for a frozen model that a stage-3 group
	// shards (FrozenSharded.ShardFrozen) before any pass: m is read
	// then, and must hold its weights until.
	EvalSharded(m *model.Model, precision string) (Compute, error)
}

// ShardLayout is the ownership of a model's units among a group's ranks.
type ShardLayout struct {
	// Units are each unit's flat offset and length (model.UnitsOf).
	Units [][2]int
	// Parts[u][i] is where part i of unit u begins (a flat offset),
	// Parts[u][n] its end; rank (i+u) mod n owns part i.
	Parts [][]int
}

// FrozenSharded is a device's Compute of a frozen model (Device.Eval: a
// KL reference) that ZeRO stage 3 shards as it shards the policy: each
// rank keeps on its device its elements of every unit, in float32, and
// the passes gather each unit over the device communicator just before
// they read it, in the order of model.UnitPlan without gradients. There
// is nothing to reduce and no optimiser state.
type FrozenSharded interface {
	Compute
	// ShardFrozen makes the passes' model sharded and opens rank
	// comm.Rank()'s side of it over layout, the rank's elements taken
	// from the weights the device holds (which then go), or, for passes
	// opened by ShardedOpener.EvalSharded, from the host model's a unit
	// at a time. Closing the Compute closes the group too.
	ShardFrozen(comm collective.Comm, layout ShardLayout) (ShardedScorer, error)
}

// FrozenShareSharded is FrozenSharded for passes opened without the
// frozen model's weights (ShardedOpener.EvalSharded) whose rank's share
// the caller keeps on the host (FrozenShare), as the trainer keeps a KL
// reference's between steps, so that the whole reference need not be on
// the host again each time the passes are opened. The passes then hold
// what ShardFrozen's do, the same values.
type FrozenShareSharded interface {
	FrozenSharded
	ShardFrozenShare(comm collective.Comm, layout ShardLayout, share FrozenShare) (ShardedScorer, error)
}

// FrozenShare is a rank's share of a frozen model on the host, in the
// form its passes hold it on the device: for passes in float32 (Half
// false) F32 is the rank's run of every unit (ShardLayout.Parts), the
// units in order. For passes that multiply in bfloat16 (Half), of each
// unit in order F32 holds the values of the run that the passes read in
// float32 (model.UnitReadsBF16's Float32 spans, in order), and BF16 the
// run rounded to bfloat16 (learner/bf16) where the passes read the unit
// in bfloat16 and not whole in float32: about 2 bytes an element in
// place of 4.
type FrozenShare struct {
	Half bool
	F32  []float32
	BF16 []uint16
}

// BaseSharded is a device's passes of a LoRA policy (AdapterTrainer)
// whose frozen base ZeRO stage 3 shards as FrozenSharded shards a
// reference: each rank keeps on its device its elements of every unit of
// the base, in float32, and every pass, training or scoring, with the
// adapter on or off, gathers each unit over the device communicator just
// before it reads it, in the order of model.UnitPlan's scoring pass or
// model.FrozenUnitPlan's training pass, handing over no gradient. The
// adapter, its gradients and its optimiser state are the stage-1 device
// group's (DeviceReduced), whole on every device.
type BaseSharded interface {
	DeviceReduced
	// ShardBase makes the passes' base sharded and opens rank
	// comm.Rank()'s side of it over layout, the rank's elements taken
	// from the base the device holds (which then goes), or, for passes
	// opened by ShardedOpener.TrainSharded, from the host model's a
	// unit at a time. Closing the Compute closes the group too.
	ShardBase(comm collective.Comm, layout ShardLayout) (ShardedScorer, error)
}

// ShardedScorer is a rank's part of the passes without gradients of a
// sharded model: a pass (Run with no loss) between BeginScore and
// EndPass reads its weights from the group; a rank with no pass to run
// runs Shadow(false) in its place, so that the group's gathers stay in
// step.
type ShardedScorer interface {
	// BeginScore makes the next pass (or Shadow) a pass without
	// gradients: its gathers alone.
	BeginScore(ctx context.Context)
	// Shadow runs the exchanges of a pass (a training pass's with train)
	// without computing one, adding nothing.
	Shadow(train bool) error
	// EndPass ends the pass that began (passErr: its failure, returned
	// first) and, in a slot, pushes the slot's sum into the round's tree.
	EndPass(passErr error) error
	// Close frees what the group holds on the device.
	Close() error
}

// ShardedGroup is a rank's part of ZeRO stage 3 on the devices. A pass of
// the passes' Compute (Run) between a Begin call and EndPass reads its
// weights from the group and hands it its gradients; a rank with no pass
// in a slot runs Shadow in its place, so that the group's collective
// calls stay in step.
type ShardedGroup interface {
	ShardedScorer
	// BeginSlot begins slot size of a round of the mini-batch's
	// reduction: has[r] says whether the slot's r-th rank adds a
	// gradient. A slot where none does is an empty node of the sum's
	// tree, and no pass runs (false). alone says the slot is its
	// round's only one (as many ranks as shards): its sum is the
	// round's, and from the second round on the group adds it into the
	// rounds' sum unit by unit as the pass hands the units over, with no
	// buffer of its own (EndRound then adds nothing).
	BeginSlot(ctx context.Context, has []bool, alone bool) bool
	// BeginMiniBatch lets the last reduced gradient go.
	BeginMiniBatch()
	// EndRound adds the round's tree sum to the mini-batch's.
	EndRound() error
	// EndMiniBatch makes the rounds' sum the reduced gradient.
	EndMiniBatch() error
	// SumSquares is the reduced gradient's sum of squares over each run
	// [lo, hi) of the rank's elements (offsets in the master layout).
	SumSquares(runs [][2]int) ([]float64, error)
	// Step applies AdamW step number steps+1 to the rank's elements,
	// clipped by the global norm sqrt(sumSquares) (nothing changes when
	// it is not finite).
	Step(cfg optim.Config, steps int64, sumSquares float64) error
	// Master copies the rank's weights (the master layout) into vals, or
	// with put from vals.
	Master(vals []float32, put bool) error
	// Moments copies the rank's moments, first (0) or second (1), into
	// vals, or with put from vals.
	Moments(moment int, vals []float32, put bool) error
	// Close (ShardedScorer's) frees what the group holds on the device;
	// the passes' model stays sharded and cannot run again.
}
