package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/par"
)

// DefaultShards is the number of virtual shards a data-parallel update
// splits each mini-batch into unless told otherwise: groups of 1, 2, 4 and
// 8 ranks then compute the same bits.
const DefaultShards = 8

// SingleShards is the virtual shards of a process that takes its steps
// alone (EnableSingle's default, RLStep's and aipo train's without
// --nproc): one, the whole mini-batch packed as one shard, its gradient
// summed in place in the model's own buffer and stepped from there, so
// that the group of one holds no gradient buffer beside the model's. A
// tree of DefaultShards shards cannot be summed in place: while its last
// shard's passes write the model's buffer, the sums of its three earlier
// subtrees (4, 2 and 1 shards) must be kept, three full-size buffers,
// and no two of them may be added before it ends without changing the
// tree. One process that wants the bits of every group that divides
// DefaultShards asks for them (EnableSingle with Shards DefaultShards,
// aipo train --nproc 1) and pays those buffers (aipo plan counts them).
const SingleShards = 1

// DataParallel is this process's part of a data-parallel group (ZeRO
// stage 1): every rank holds the whole policy, computes the gradients of
// its share of each mini-batch, and updates the optimiser state of its
// share of the parameters, whose new values every rank then gathers.
//
// The update does not depend on the number of ranks. Each mini-batch is
// split into Shards virtual shards, balanced by tokens, independently of
// the group (shardSamples); each shard is packed into micro-batches of its
// own, so every matrix product has the same shape at any group size; the
// shards' gradients are summed in one fixed binary tree whose subtrees are
// the ranks' (rank r owns a contiguous run of shards and sums it locally,
// then the ranks' sums meet in the same tree through an all-to-all and a
// sum in rank order here: the engine only moves bytes); the gradient norm
// is the sum, in chunk order, of per-chunk partial sums; AdamW is
// elementwise. When the group size divides Shards and Shards/size is a
// power of two, the tree is the same at every size and so are the bits; at
// other sizes (3 ranks of 8 shards) the sums are grouped differently and
// the update agrees within float32 rounding.
//
// At stage 2 (Zero) on the CPU no rank holds a whole gradient: the model
// keeps its weights and hands each unit's gradient over as the backward
// pass ends it (model.Model.ShardGrads), and the ranks exchange it by
// stage 3's schedule (zero3: shards computed by rank s mod N in slots,
// a shard's micro-batches added round by round), without the gathers;
// each rank updates its parts and the ranks gather the updated parts
// into the model's weights. Its bits are stage 3's, and stage 1's when
// each shard packs into one micro-batch. A device's passes (whose
// gradients come to the host whole) keep the run-by-run stage 2: the
// model reports each run of its gradient buffer as it finishes it
// (model.Model.SetGradsReady), and a goroutine folds that run of the
// rank's partial sum and exchanges it, in pieces of at most zero2Piece
// floats; the sums are stage 1's elementwise operations in the same
// order, so the bits are stage 1's.
//
// At stage 3 (zero3.go) the weights are sharded as well.
type DataParallel struct {
	Comm   collective.Comm
	Shards int
	Zero   int // the ZeRO stage, 1 or 2

	chunks  []optim.Chunk
	bounds  []int // rank r owns chunks [bounds[r], bounds[r+1])
	start   []int // rank r owns flat elements [start[r], start[r+1])
	offset  []int // flat offset of each parameter
	opt     *optim.Shard
	grad    []float32 // the reduced gradient of this rank's elements
	gradBuf []float32 // grad's own storage in a group of several ranks
	// flatGrads says that the model's gradient buffer (GradData) holds
	// the parameters' gradients in their order, so that a shard's gradient
	// is read from it in place rather than copied out first.
	flatGrads bool
	// paramData is the model's flat parameter buffer when the parameters
	// lie in it in their order (flatParams): the ranks' updated shares
	// are gathered straight into it.
	flatParams bool
	paramData  []float32
	runs       []model.Span // stage 2: the model's gradient runs (GradRuns)
	z3         *zero3       // stage 3: the rank's share of the weights, gradients and moments
	dev        deviceDP     // the group on the devices (DPConfig.DeviceComm; dpdevice.go)
	// zref is, at stage 3, the rank's share of the frozen reference's
	// weights (zero3ref.go), sharded from refOf, the reference it was
	// made for.
	zref  *zero3
	refOf *model.Model
	// loraZero3: a LoRA policy at stage 3, whose adapter the group
	// reduces and shards as stage 1 does, and whose frozen base is
	// sharded: base is the rank's share of it (lora.go), made from
	// baseOf, the policy it was sharded from.
	loraZero3 bool
	base      *zero3
	baseOf    *model.Model
	// baseDev is, with the passes on a device, the group of the LoRA
	// policy's base sharded on the devices (lora.go: shardBaseDevice),
	// opened on baseDevOf, those passes; their Close closes it.
	baseDev   backend.ShardedScorer
	baseDevOf Compute
	// zrefDev is, at stage 3 on the devices, the group of the frozen
	// reference's passes sharded on the devices (zero3ref.go), opened on
	// refDevOf, those passes; their Close closes it.
	zrefDev  backend.ShardedScorer
	refDevOf Compute

	// Sent counts the bytes this rank has handed the engine for the other
	// ranks (the payload of each exchange, not the engine's own framing).
	Sent int64
	// Overlapped counts the gradient runs that stage 2 began to reduce
	// while a backward pass was still running (GradRuns' runs, all but the
	// last of each pass when the model reports them).
	Overlapped int64
}

// DPConfig is how a data-parallel group splits and reduces a step.
type DPConfig struct {
	// Shards is the virtual shards of a mini-batch: a power of two, at
	// least the group's size (0: GroupShards of the size), for the same
	// bits at every size that divides it; or the group's size, one shard
	// a rank, each packed whole: fewer and larger products, and no shard
	// gradient copied, but bits that depend on the size (within float32
	// rounding of one process's).
	Shards int
	// Zero is the ZeRO stage: 1 (0 too) shards the optimiser state; 2
	// also the gradients, each layer's exchanged as the backward pass
	// ends it, with no whole gradient on the CPU (on a device, whose
	// gradients come whole to the host, the last shard's runs are
	// exchanged piece by piece); 3 (the CPU) the weights as well (see
	// DataParallel and zero3).
	Zero int
	// DeviceComm, when set, is the group's communicator of device memory
	// (learner/collective/nccl): passes on a device that can
	// (backend.DeviceReduced) then reduce the gradients and keep the
	// rank's share of the optimiser state on the devices through it
	// (dpdevice.go), stage 2 as stage 1; the group's communicator still
	// carries the step's host values (log-probabilities, statistics, the
	// norm's partial sums).
	DeviceComm collective.Comm
	// KeepGathered is, at stage 3 on the CPU, the most bytes of gathered
	// float32 weights a rank keeps from one pass to the next until the
	// weights change (the optimiser's step): the units that fit, taken
	// in the model's order (KeptUnits), are gathered once a mini-batch
	// instead of twice a training pass and once a scoring pass. The bits
	// are the same; 0 (default) keeps none, the least memory.
	KeepGathered int64
}

// EnableDataParallel makes the learner's updates those of rank
// comm.Rank() of a group configured by cfg. The optimiser state becomes
// this rank's share of l.Opt's (empty until ReadOptimizer). The passes
// run on the host model (the CPU backend) or on a device whose gradients
// come to the host (backend.HostReduced: each shard's are copied into
// the host model's buffer, and the gathered parameters go back to the
// device after each update). A device's backward pass does not report
// its runs, so at stage 2 the last shard's runs are exchanged piece by
// piece once its gradient is on the host: the same bits and buffers, no
// overlap.
func (l *Learner) EnableDataParallel(comm collective.Comm, cfg DPConfig) error {
	dev, err := l.hostReduced()
	if err != nil {
		return err
	}
	n := comm.Size()
	shards := cfg.Shards
	if shards == 0 {
		shards = GroupShards(n)
	}
	if shards != n && (shards < n || shards&(shards-1) != 0) {
		return fmt.Errorf("trainer: %d virtual shards for %d ranks: give a power of two that is at least the number of ranks, or the number of ranks", shards, n)
	}
	zero := max(cfg.Zero, 1)
	if zero > 3 {
		return fmt.Errorf("trainer: ZeRO stage %d: give 1 (the optimiser state sharded), 2 (the gradients reduced layer by layer too) or 3 (the weights sharded as well)", cfg.Zero)
	}
	if err := checkLoRAGroup(l.Policy, zero, dev, cfg.DeviceComm != nil); err != nil {
		return err
	}
	// A LoRA policy's group is stage 1's over the adapter; at stage 3 its
	// frozen base is sharded as well (lora.go: loraZero3).
	lora := l.Policy != nil && l.Policy.HasAdapter()
	params := l.Params()
	dp := &DataParallel{Comm: comm, Shards: shards, Zero: zero, chunks: optim.Chunks(params), offset: make([]int, len(params)+1)}
	for i, p := range params {
		dp.offset[i+1] = dp.offset[i] + len(p.Data)
	}
	if l.Policy != nil {
		flat, data := flatBuffers(l.Policy)
		dp.flatGrads = len(flat) == dp.offset[len(params)]
		dp.flatParams = len(data) == dp.offset[len(params)]
		for i, p := range backend.OptimParams(l.Policy) {
			dp.flatGrads = dp.flatGrads && (len(p.Grad) == 0 || &p.Grad[0] == &flat[dp.offset[i]])
			dp.flatParams = dp.flatParams && (len(p.Data) == 0 || &p.Data[0] == &data[dp.offset[i]])
		}
		if dp.flatParams {
			dp.paramData = data
		}
	}
	if zero == 2 && !dp.flatGrads {
		return errors.New("trainer: ZeRO stage 2 reduces the host model's flat gradient buffer run by run (model.Model.GradRuns); this learner's gradients are not in one: use stage 1")
	}
	if dev != nil && (!dp.flatGrads || !dp.flatParams) {
		return errors.New("trainer: a device's data-parallel group reduces through the host model's flat gradient and parameter buffers; this learner's are not flat")
	}
	if zero == 2 {
		dp.runs = l.Policy.GradRuns()
	}
	dp.bounds = optim.Partition(dp.chunks, n)
	dp.start = make([]int, n+1)
	for r := range n + 1 {
		dp.start[r] = dp.flatStart(dp.bounds[r])
	}
	if !lora && (zero == 3 || zero == 2 && dev == nil) {
		// (bounds and start are the parts the optimiser state is saved
		// in, as stage 1 owns them.)
		if zero == 3 && dev != nil {
			// On the devices: over the device communicator alone.
			if err := dp.enableDevice(dev, cfg.DeviceComm); err != nil {
				return err
			}
		}
		if err := l.enableZero3(dp, zero == 2); err != nil {
			return err
		}
		if cfg.KeepGathered > 0 {
			if dp.z3.devMode() {
				return errors.New("trainer: keeping gathered weights between passes (DPConfig.KeepGathered) is built for stage 3 on the CPU; on GPUs every pass gathers the units it reads: give 0")
			}
			if !dp.z3.whole {
				dp.z3.keep = KeptUnits(dp.z3.units, cfg.KeepGathered)
				dp.z3.kept = make([][]float32, len(dp.z3.units))
			}
		}
		l.DP = dp
		if dp.z3.devMode() && l.RefCompute != nil {
			// The reference's whole weights leave the devices as soon
			// as the group can hold its shares, before any step's.
			return l.shardReferenceDevice()
		}
		return nil
	}
	opt, err := optim.NewShard(l.Opt.Config(), dp.chunks[dp.bounds[comm.Rank()]:dp.bounds[comm.Rank()+1]])
	if err != nil {
		return err
	}
	opt.SetSteps(l.Opt.Steps())
	dp.opt = opt
	if err := dp.enableDevice(dev, cfg.DeviceComm); err != nil {
		return err
	}
	// (At stage 3 the LoRA policy's base is sharded by its first step:
	// shardBase; on the devices at once, as the reference is, so that
	// its whole weights leave the devices before any step's buffers.)
	dp.loraZero3 = lora && zero == 3
	l.DP = dp
	if dp.loraZero3 && dev != nil {
		return l.shardBaseDevice(dev)
	}
	return nil
}

// hostReduced is the policy's passes when they run on a device whose
// gradients the group reduces on the host (backend.HostReduced), nil when
// they run on the host model itself; an error for a device without it.
// It is asked at each use: the passes are reopened between steps while
// the DataParallel stays.
func (l *Learner) hostReduced() (backend.HostReduced, error) {
	if l.PolicyCompute == nil || backend.OnHost(l.PolicyCompute) {
		return nil, nil
	}
	dev, ok := l.PolicyCompute.(backend.HostReduced)
	if !ok {
		return nil, fmt.Errorf("trainer: the passes of this device (%T) cannot bring their gradients to the host for a data-parallel group", l.PolicyCompute)
	}
	return dev, nil
}

// flatStart is the flat offset of chunk i (the end of all when i is past
// the last).
func (dp *DataParallel) flatStart(i int) int {
	if i >= len(dp.chunks) {
		return dp.offset[len(dp.offset)-1]
	}
	c := dp.chunks[i]
	return dp.offset[c.Param] + c.Lo
}

// owner is the rank that computes virtual shard s of v among n ranks: a
// contiguous run of shards per rank.
func owner(s, v, n int) int { return s * n / v }

// shardSamples splits each mini-batch (samples i with i % miniBatches ==
// mb) into v virtual shards balanced by tokens: each sample, in order,
// goes to the shard with the fewest tokens so far (the first of equals).
// The split depends on the samples alone, never on the group. (A
// mini-batch of fewer samples than shards fills shards 0, 1, ...: whole
// slots of stages 2 and 3, where rank r computes shards r, r+N, ...;
// stage 1's contiguous runs then leave the last ranks idle. No order
// serves both: docs/scaling.md, "Weak scaling".)
func shardSamples(seqs []Sequence, miniBatches, v int) [][][]int {
	out := make([][][]int, miniBatches)
	for mb := range out {
		out[mb] = make([][]int, v)
		load := make([]int, v)
		for i := mb; i < len(seqs); i += miniBatches {
			best := 0
			for s := 1; s < v; s++ {
				if load[s] < load[best] {
					best = s
				}
			}
			out[mb][best] = append(out[mb][best], i)
			load[best] += seqs[i].Len()
		}
	}
	return out
}

// RLStepDP is RLStep as rank comm.Rank() of the group of EnableDataParallel:
// every rank passes the same samples and cfg, computes the passes of its
// virtual shards, and ends with the same parameters and statistics.
func (l *Learner) RLStepDP(ctx context.Context, cfg RLConfig, samples []RLSample) (RLStats, error) {
	dp := l.DP
	if dp == nil {
		return RLStats{}, errors.New("trainer: RLStepDP without EnableDataParallel")
	}
	seqs, err := l.rlSequences(cfg, samples)
	if err != nil {
		return RLStats{}, err
	}
	if dp.z3 != nil {
		if err := l.shardReference(cfg); err != nil {
			return RLStats{}, err
		}
		if err := l.reshard(); err != nil {
			return RLStats{}, err
		}
	}
	if dp.loraZero3 {
		if err := l.shardBase(); err != nil {
			return RLStats{}, err
		}
	}
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	groups := shardSamples(seqs, cfg.MiniBatches, v)

	// pi_old (and the reference's log-probs) of this rank's samples, each
	// shard packed on its own, then everyone's: the loss's aggregation of
	// a mini-batch needs the counts of every shard.
	old := make([][]float32, len(seqs))
	var ref [][]float32
	rc := l.ref()
	if rc != nil && cfg.Loss.KLCoef != 0 {
		ref = make([][]float32, len(seqs))
	}
	ownerOf := make([]int, len(seqs))
	if dp.z3 != nil && dp.z3.devMode() {
		if err := l.scoreZero3Device(ctx, groups, seqs, cfg.MicroBatchTokens, old); err != nil {
			return RLStats{}, err
		}
		if ref != nil && dp.zrefDev != nil {
			// The reference's shards on the devices, gathered a unit
			// at a time.
			if err := l.scoreShardedDevice(ctx, dp.zrefDev, rc, groups, seqs, cfg.MicroBatchTokens, ref, ownerZero3(n)); err != nil {
				return RLStats{}, fmt.Errorf("trainer: the reference's log-probs: %w", err)
			}
		}
	} else if dp.z3 != nil {
		if err := l.scoreZero3(ctx, groups, seqs, cfg.MicroBatchTokens, old); err != nil {
			return RLStats{}, err
		}
		if ref != nil && dp.zref != nil {
			// The reference's shards, gathered a unit at a time.
			if err := l.scoreSharded(ctx, dp.zref, l.Ref, rc, groups, seqs, cfg.MicroBatchTokens, ref, ownerZero3(n)); err != nil {
				return RLStats{}, fmt.Errorf("trainer: the reference's log-probs: %w", err)
			}
			dp.Sent += dp.zref.sent.Swap(0)
		}
	} else if dp.base != nil {
		// A LoRA policy on its sharded base, and the base alone (the
		// adapter off) for the reference: stage 1's shards, their
		// passes gathering the base a unit at a time.
		if err := l.scoreSharded(ctx, dp.base, l.Policy, l.policy(), groups, seqs, cfg.MicroBatchTokens, old, ownerStage1(v, n)); err != nil {
			return RLStats{}, err
		}
		if ref != nil {
			if err := l.scoreSharded(ctx, dp.base, l.Policy, rc, groups, seqs, cfg.MicroBatchTokens, ref, ownerStage1(v, n)); err != nil {
				return RLStats{}, fmt.Errorf("trainer: the reference's log-probs: %w", err)
			}
		}
		dp.Sent += dp.base.sent.Swap(0)
	} else if dp.baseDev != nil {
		// The same on the devices: the base's units gathered over the
		// device communicator.
		if err := l.scoreShardedDevice(ctx, dp.baseDev, l.policy(), groups, seqs, cfg.MicroBatchTokens, old, ownerStage1(v, n)); err != nil {
			return RLStats{}, fmt.Errorf("trainer: pi_old: %w", err)
		}
		if ref != nil {
			if err := l.scoreShardedDevice(ctx, dp.baseDev, rc, groups, seqs, cfg.MicroBatchTokens, ref, ownerStage1(v, n)); err != nil {
				return RLStats{}, fmt.Errorf("trainer: the reference's log-probs: %w", err)
			}
		}
	}
	for mb := range groups {
		for s, order := range groups[mb] {
			o := owner(s, v, n)
			if dp.z3 != nil {
				o = owner3(s, n)
			}
			for _, i := range order {
				ownerOf[i] = o
			}
			if o != rank {
				continue
			}
			if dp.z3 != nil || dp.base != nil || dp.baseDev != nil {
				// pi_old (and at stage 3 with LoRA the reference's
				// log-probs) were scored above.
			} else if err := logProbsInto(old, l.policy(), seqs, order, cfg.MicroBatchTokens); err != nil {
				return RLStats{}, err
			}
			if ref != nil && dp.zref == nil && dp.zrefDev == nil && dp.base == nil && dp.baseDev == nil {
				if err := logProbsInto(ref, rc, seqs, order, cfg.MicroBatchTokens); err != nil {
					return RLStats{}, err
				}
			}
		}
	}
	if err := dp.shareLogProbs(ctx, old, seqs, ownerOf); err != nil {
		return RLStats{}, err
	}
	if ref != nil {
		if err := dp.shareLogProbs(ctx, ref, seqs, ownerOf); err != nil {
			return RLStats{}, err
		}
	}

	st := RLStats{Metrics: map[string]float64{}, Mismatch: measureMismatch(samples, old), MismatchByLag: measureMismatchByLag(samples, old)}
	st.OldLogMAE = st.Mismatch.AbsMean
	metricN := 0
	for epoch := 0; epoch < cfg.PPOEpochs; epoch++ {
		for mb := range groups {
			minibatch, step := l.miniBatchDP, l.stepDP
			if dp.z3 != nil && dp.z3.devMode() {
				minibatch, step = l.miniBatchZero3Device, l.stepZero3Device
			} else if dp.z3 != nil {
				minibatch, step = l.miniBatchZero3, l.stepZero3
			} else if dp.dev.comm != nil {
				minibatch, step = l.miniBatchDevice, l.stepDevice
			}
			part, err := minibatch(ctx, cfg, samples, seqs, groups[mb], old, ref)
			if err != nil {
				return RLStats{}, err
			}
			if part.micro == 0 {
				continue
			}
			if st.GradNorm, err = step(ctx); err != nil {
				return RLStats{}, err
			}
			st.Loss += part.loss
			st.Tokens += part.tokens
			metricN += part.micro
			for k, x := range part.metrics {
				st.Metrics[k] += x
			}
			st.OptSteps++
		}
	}
	if st.OptSteps == 0 {
		return RLStats{}, errors.New("trainer: no mini-batch had a token to train")
	}
	st.Loss /= float64(st.OptSteps)
	for k := range st.Metrics {
		st.Metrics[k] /= float64(metricN)
	}
	return st, nil
}

// shareLogProbs fills lps[i] on every rank from the rank that computed it
// (ownerOf[i]): an all-gather of each rank's log-probs, samples in order.
func (dp *DataParallel) shareLogProbs(ctx context.Context, lps [][]float32, seqs []Sequence, ownerOf []int) error {
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	if n == 1 {
		return nil
	}
	counts := make([]int, n)
	var send []float32
	for i, r := range ownerOf {
		counts[r] += len(seqs[i].Response)
		if r == rank {
			send = append(send, lps[i]...)
		}
	}
	pos := make([]int, n)
	total := 0
	for r, c := range counts {
		pos[r] = total
		total += c
	}
	recv := make([]float32, total)
	dp.Sent += 4 * int64(len(send)) * int64(n-1)
	if err := dp.Comm.AllGather(ctx, collective.Float32s(send), collective.Float32s(recv), counts); err != nil {
		return fmt.Errorf("trainer: sharing pi_old: %w", err)
	}
	for i, r := range ownerOf {
		k := len(seqs[i].Response)
		if r != rank {
			lps[i] = recv[pos[r] : pos[r]+k : pos[r]+k]
		}
		pos[r] += k
	}
	return nil
}

// miniBatchPart is what one mini-batch's passes add to the statistics.
type miniBatchPart struct {
	loss    float64
	tokens  int
	micro   int
	metrics map[string]float64
}

// planShards is every shard's micro-batches, loss inputs and aggregation
// counts (on every rank, no model work: the denominator spans the
// mini-batch), their total, and the metrics the loss reports.
func planShards(cfg RLConfig, samples []RLSample, seqs []Sequence, shards [][]int, old, ref [][]float32) ([][]microBatch, [][]loss.Inputs, [][]float64, float64, map[string]bool, error) {
	v := len(shards)
	mbs := make([][]microBatch, v)
	inputs := make([][]loss.Inputs, v)
	counts := make([][]float64, v)
	var total float64
	names := map[string]bool{}
	for s, order := range shards {
		if len(order) == 0 {
			continue
		}
		mbs[s] = pack(seqs, order, cfg.MicroBatchTokens)
		inputs[s] = make([]loss.Inputs, len(mbs[s]))
		counts[s] = make([]float64, len(mbs[s]))
		for b, mb := range mbs[s] {
			inputs[s][b] = buildInputs(mb, samples, old, ref)
			out, err := loss.Compute(cfg.Loss, withLogProb(inputs[s][b], inputs[s][b].OldLogProb))
			if err != nil {
				return nil, nil, nil, 0, nil, err
			}
			counts[s][b] = out.Count(cfg.Loss)
			total += counts[s][b]
			if counts[s][b] != 0 {
				for k := range out.Metrics {
					names[k] = true
				}
			}
		}
	}
	return mbs, inputs, counts, total, names, nil
}

// miniBatchDP computes this rank's shards of one mini-batch (shards[s] is
// shard s's samples), sums their gradients with the group's in the fixed
// tree, and leaves the sum of this rank's chunks in dp's reduced gradient,
// ready for stepDP. It returns the mini-batch's statistics, the same on
// every rank.
func (l *Learner) miniBatchDP(ctx context.Context, cfg RLConfig, samples []RLSample, seqs []Sequence, shards [][]int, old, ref [][]float32) (miniBatchPart, error) {
	dp := l.DP
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	l.keyDropout()
	mbs, inputs, counts, total, names, err := planShards(cfg, samples, seqs, shards, old, ref)
	if err != nil {
		return miniBatchPart{}, err
	}
	if total == 0 {
		return miniBatchPart{}, nil
	}
	c := l.policy()
	var tree sumTree
	parts := make([]miniBatchPart, v)
	var mine []int
	last := -1 // stage 2: the rank's last shard with a token to train
	for s := range v {
		if owner(s, v, n) == rank {
			mine = append(mine, s)
			if slices.ContainsFunc(counts[s], func(x float64) bool { return x != 0 }) {
				last = s
			}
		}
	}
	shadows := func() error { return nil }
	if dp.base != nil {
		// The passes read the sharded base through its feed, every
		// rank as many as the rank with the most (basePasses).
		c, shadows = l.basePasses(ctx, c, counts)
	}
	for i, s := range mine {
		if dp.Zero == 2 && s == last {
			// The shards after it are empty: nil leaves the runs' sums
			// push after this shard's.
			part, err := l.shardGradientOverlapped(ctx, c, cfg, mbs[s], inputs[s], counts[s], total, &tree, len(mine)-1-i)
			if err != nil {
				return miniBatchPart{}, err
			}
			parts[s] = part
			return dp.gatherParts(ctx, parts, names)
		}
		leaf, part, err := l.shardGradient(c, cfg, mbs[s], inputs[s], counts[s], total, nil)
		if err != nil {
			return miniBatchPart{}, err
		}
		parts[s] = part
		if len(mine) == 1 && dp.Zero == 1 {
			// The rank's one shard is its partial sum: read in place
			// (the model's buffer, when leaf is), by the reduction that
			// follows before any pass writes it again. (The shadows
			// write no gradient.)
			if err := shadows(); err != nil {
				return miniBatchPart{}, err
			}
			if err := dp.reduce(ctx, l.zerosIfNil(leaf)); err != nil {
				return miniBatchPart{}, err
			}
			return dp.gatherParts(ctx, parts, names)
		}
		if dp.flatGrads {
			// leaf is the model's buffer, which the next shard's passes
			// overwrite: the tree copies it only when it must keep it.
			tree.pushBorrowed(leaf)
		} else {
			tree.push(leaf)
		}
	}
	if err := shadows(); err != nil {
		return miniBatchPart{}, err
	}
	if dp.Zero == 2 {
		// No shard of this rank had a token to train: its partial sum is
		// zeros, exchanged run by run as the others' are.
		z := dp.newRunReducer(ctx, &tree, nil, 0)
		for i := range dp.runs {
			z.reduceRun(i)
		}
		if z.err != nil {
			return miniBatchPart{}, z.err
		}
		return dp.gatherParts(ctx, parts, names)
	}
	if err := dp.reduce(ctx, l.zerosIfNil(tree.sum())); err != nil {
		return miniBatchPart{}, err
	}
	return dp.gatherParts(ctx, parts, names)
}

// zerosIfNil is partial, or when it is nil (the rank's shards had no
// token to train) zeros in the model's flat gradient buffer, which no sum
// needs any more once every shard of the rank has been added or copied:
// no full-size buffer of zeros is allocated. (nil when the gradients are
// not flat: reduce makes the zeros.)
func (l *Learner) zerosIfNil(partial []float32) []float32 {
	if partial != nil || !l.DP.flatGrads {
		return partial
	}
	flat, _ := flatBuffers(l.Policy)
	clear(flat)
	return flat
}

// shardGradientOverlapped is shardGradient of the rank's last shard with a
// token to train at ZeRO stage 2: during its last micro-batch's backward
// pass each finished run of the model's gradient buffer goes to a
// goroutine that reduces it (runReducer) while the pass goes on; runs the
// pass did not report (a backend without the report) are reduced after
// it. tree holds the rank's earlier shards' sums; rest empty shards follow.
func (l *Learner) shardGradientOverlapped(ctx context.Context, c Compute, cfg RLConfig, mbs []microBatch, inputs []loss.Inputs, counts []float64, total float64, tree *sumTree, rest int) (miniBatchPart, error) {
	dp := l.DP
	z := dp.newRunReducer(ctx, tree, l.Policy.GradData(), rest)
	queue := make(chan int, len(dp.runs))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range queue {
			z.reduceRun(i)
		}
	}()
	next := 0 // the next run the pass should report
	reported := func(run int) {
		if run == next && next < len(dp.runs) {
			queue <- run
			next++
			if next < len(dp.runs) {
				dp.Overlapped++
			}
		}
	}
	_, part, err := l.shardGradient(c, cfg, mbs, inputs, counts, total, func(on bool) {
		if on {
			l.Policy.SetGradsReady(reported)
		} else {
			l.Policy.SetGradsReady(nil)
		}
	})
	if err == nil {
		for ; next < len(dp.runs); next++ {
			queue <- next
		}
	}
	close(queue)
	<-done
	if err != nil {
		return part, err
	}
	return part, z.err
}

// shardGradient runs one virtual shard's micro-batches and returns the
// shard's gradient, flat over the parameters in order (nil for a shard
// without a token to train: zeros), and its statistics. Under flatGrads
// the gradient is the model's own buffer, valid until the next passes.
//
// lastPass, when not nil, is called with true before the shard's last
// micro-batch with a token to train and with false after it.
func (l *Learner) shardGradient(c Compute, cfg RLConfig, mbs []microBatch, inputs []loss.Inputs, counts []float64, total float64, lastPass func(on bool)) ([]float32, miniBatchPart, error) {
	part := miniBatchPart{metrics: map[string]float64{}}
	lastBusy := -1
	for b, x := range counts {
		if x != 0 {
			lastBusy = b
		}
	}
	if lastBusy < 0 {
		return nil, part, nil
	}
	if err := c.ZeroGrads(); err != nil {
		return nil, part, err
	}
	for b, mb := range mbs {
		if counts[b] == 0 {
			continue
		}
		w := counts[b] / total
		if lastPass != nil && b == lastBusy {
			lastPass(true)
		}
		out, err := runMicroBatch(c, cfg.Loss, mb, inputs[b], w)
		if lastPass != nil && b == lastBusy {
			lastPass(false)
		}
		if err != nil {
			return nil, part, err
		}
		part.loss += w * out.Loss
		addMetrics(part.metrics, out.Metrics)
		part.micro++
		part.tokens += len(mb.scored)
	}
	if l.DP.flatGrads {
		flat, _ := flatBuffers(l.Policy)
		if dev, err := l.hostReduced(); err != nil {
			return nil, part, err
		} else if dev != nil && l.DP.dev.comm == nil {
			// A device's shard gradient comes to the host model's buffer,
			// which the next shard's copy overwrites as the host passes'
			// would.
			if err := dev.GradsTo(flat); err != nil {
				return nil, part, fmt.Errorf("trainer: the shard's gradients from the device: %w", err)
			}
		}
		return flat, part, nil
	}
	flat := make([]float32, l.DP.start[len(l.DP.start)-1])
	for i, p := range l.Params() {
		copy(flat[l.DP.offset[i]:], p.Grad)
	}
	return flat, part, nil
}

// sumTree sums buffers pushed in order in a binary tree: two sums of
// equally many leaves are added as soon as both exist (left += right), so
// the leaves of a power-of-two run meet in a perfect tree, and a run that
// is a subtree of a larger one sums to the same bits as that subtree
// does there. Nil leaves are zeros.
type sumTree struct {
	stack []treeNode
}

type treeNode struct {
	leaves int
	sum    []float32
}

func (t *sumTree) push(leaf []float32) {
	t.stack = append(t.stack, treeNode{1, leaf})
	t.merge()
}

// pushBorrowed is push of a leaf that is valid during the call only (the
// model's gradient buffer): when it is added into the sum on top of the
// stack at once (an odd leaf), it is read in place; when the tree must
// keep it, it is copied. The sums are those of push.
func (t *sumTree) pushBorrowed(leaf []float32) {
	if n := len(t.stack); leaf != nil && n > 0 && t.stack[n-1].leaves == 1 {
		t.stack[n-1] = treeNode{2, addInto(t.stack[n-1].sum, leaf, false)}
		t.merge()
		return
	}
	if leaf != nil {
		leaf = slices.Clone(leaf)
	}
	t.push(leaf)
}

// merge adds the top two sums while they hold equally many leaves.
func (t *sumTree) merge() {
	for len(t.stack) >= 2 {
		a, b := t.stack[len(t.stack)-2], t.stack[len(t.stack)-1]
		if a.leaves != b.leaves {
			break
		}
		t.stack = t.stack[:len(t.stack)-2]
		t.stack = append(t.stack, treeNode{a.leaves + b.leaves, addInto(a.sum, b.sum, true)})
	}
}

// sum folds what is left from the right (runs that are not a power of
// two) and returns the total (nil: all leaves were nil).
func (t *sumTree) sum() []float32 {
	for len(t.stack) >= 2 {
		a, b := t.stack[len(t.stack)-2], t.stack[len(t.stack)-1]
		t.stack = t.stack[:len(t.stack)-2]
		t.stack = append(t.stack, treeNode{a.leaves + b.leaves, addInto(a.sum, b.sum, true)})
	}
	if len(t.stack) == 0 {
		return nil
	}
	return t.stack[0].sum
}

// addInto returns a + b elementwise (nil is zeros; every element is
// added, so that -0 becomes +0 as in any sum with a zero) in a's storage,
// or in b's when a is nil and b is the tree's own (a sum or a kept leaf,
// not a borrowed one). Only a nil a beside a borrowed b takes new memory:
// a step of a large model would otherwise take a fresh 4P buffer, and the
// page faults of its first touch, for every sum with an empty shard.
func addInto(a, b []float32, ownB bool) []float32 {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil && ownB:
		a, b = b, nil
	case a == nil:
		a = make([]float32, len(b))
	}
	// Element by element across the cores: the same bits at any count.
	par.For(len(a), 1<<16, func(lo, hi int) {
		if b == nil {
			for i := lo; i < hi; i++ {
				a[i] += 0
			}
			return
		}
		for i := lo; i < hi; i++ {
			a[i] += b[i]
		}
	})
	return a
}

// reduce sums the ranks' partial gradients (each the tree sum of its
// shards; nil is zeros) and keeps this rank's elements of the total in
// dp.grad: an all-to-all sends each rank its elements of every partial,
// and the rank adds them in rank order in the same tree. partial may be
// the model's gradient buffer (a rank's one shard read in place): at one
// rank dp.grad is then that buffer, which stepDP reads before any pass
// writes it again.
func (dp *DataParallel) reduce(ctx context.Context, partial []float32) error {
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	lo, hi := dp.start[rank], dp.start[rank+1]
	if partial == nil {
		partial = make([]float32, dp.start[n])
	}
	if n == 1 {
		dp.grad = partial[lo:hi]
		return nil
	}
	send, recv := make([]int, n), make([]int, n)
	for j := range n {
		send[j], recv[j] = dp.start[j+1]-dp.start[j], hi-lo
	}
	buf := make([]float32, n*(hi-lo))
	dp.Sent += 4 * int64(len(partial)-(hi-lo))
	if err := dp.Comm.AllToAll(ctx, collective.Float32s(partial), send, collective.Float32s(buf), recv); err != nil {
		return fmt.Errorf("trainer: reducing the gradients: %w", err)
	}
	var t sumTree
	for j := range n {
		t.push(buf[j*(hi-lo) : (j+1)*(hi-lo)])
	}
	// The sum is the receive buffer's first part: copied into a buffer of
	// the rank's share, so that the N times larger receive buffer does
	// not live on between steps.
	if len(dp.gradBuf) != hi-lo {
		dp.gradBuf = make([]float32, hi-lo)
	}
	copy(dp.gradBuf, t.sum())
	dp.grad = dp.gradBuf
	return nil
}

// stepDP applies the optimiser to this rank's chunks from the reduced
// gradient, clipped by the global norm (from every chunk's partial sum,
// in chunk order), and gathers every rank's new parameters. It returns
// the norm; with a norm that is not finite nothing changes on any rank.
func (l *Learner) stepDP(ctx context.Context) (float64, error) {
	dp := l.DP
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	if n == 1 {
		// The group of one's reduced gradient is the tree's sum (or the
		// model's buffer): let it go with the step, so that it does not
		// live beside the next mini-batch's tree.
		defer func() { dp.grad = nil }()
	}
	mine := dp.chunks[dp.bounds[rank]:dp.bounds[rank+1]]
	grads := make([][]float32, len(mine))
	partial := make([]float64, len(mine))
	off := 0
	for i, c := range mine {
		grads[i] = dp.grad[off : off+c.Len()]
		off += c.Len()
	}
	par.Tasks(len(mine), func(_, i int) { partial[i] = optim.SquaredSum(grads[i]) })
	counts := make([]int, n)
	for r := range n {
		counts[r] = dp.bounds[r+1] - dp.bounds[r]
	}
	all, err := dp.allGatherFloat64(ctx, partial, counts)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	norm := optim.NormOfSquares(all)
	params := l.Params()
	applied, err := dp.opt.Step(params, grads, norm)
	if err != nil || !applied {
		return norm, err
	}
	l.Opt.SetSteps(dp.opt.Steps())
	if err := dp.gatherParams(ctx, params); err != nil {
		return norm, err
	}
	if dev, err := l.hostReduced(); err != nil {
		return norm, err
	} else if dev != nil {
		if err := dev.LoadParams(dp.paramData); err != nil {
			return norm, fmt.Errorf("trainer: the updated parameters to the device: %w", err)
		}
	}
	return norm, nil
}

// gatherParams gives every rank every rank's parameters.
func (dp *DataParallel) gatherParams(ctx context.Context, params []optim.Param) error {
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	if n == 1 {
		return nil
	}
	flat := dp.paramData
	if !dp.flatParams {
		flat = make([]float32, dp.start[n])
		for i, p := range params {
			copy(flat[dp.offset[i]:], p.Data)
		}
	}
	counts := make([]int, n)
	for r := range n {
		counts[r] = dp.start[r+1] - dp.start[r]
	}
	// The rank's own share is sent from a copy: the engine writes every
	// share, this one included, into flat.
	send := slices.Clone(flat[dp.start[rank]:dp.start[rank+1]])
	dp.Sent += 4 * int64(len(send)) * int64(n-1)
	if err := dp.Comm.AllGather(ctx, collective.Float32s(send), collective.Float32s(flat), counts); err != nil {
		return fmt.Errorf("trainer: gathering the updated parameters: %w", err)
	}
	if !dp.flatParams {
		for i, p := range params {
			copy(p.Data, flat[dp.offset[i]:dp.offset[i+1]])
		}
	}
	return nil
}

// allGatherFloat64 gathers float64 values (counts[r] from rank r) as the
// two 32-bit halves of each, so that nothing is rounded on the way.
func (dp *DataParallel) allGatherFloat64(ctx context.Context, mine []float64, counts []int) ([]float64, error) {
	if dp.Comm.Size() == 1 {
		return mine, nil
	}
	send := make([]float32, 2*len(mine))
	for i, x := range mine {
		b := math.Float64bits(x)
		send[2*i], send[2*i+1] = math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32))
	}
	c2 := make([]int, len(counts))
	total := 0
	for r, c := range counts {
		c2[r] = 2 * c
		total += c
	}
	recv := make([]float32, 2*total)
	dp.Sent += 4 * int64(len(send)) * int64(dp.Comm.Size()-1)
	if err := dp.Comm.AllGather(ctx, collective.Float32s(send), collective.Float32s(recv), c2); err != nil {
		return nil, err
	}
	out := make([]float64, total)
	for i := range out {
		out[i] = math.Float64frombits(uint64(math.Float32bits(recv[2*i])) | uint64(math.Float32bits(recv[2*i+1]))<<32)
	}
	return out, nil
}

// gatherParts adds up the shards' statistics of a mini-batch in shard
// order on every rank (each rank has those of its own shards in parts).
func (dp *DataParallel) gatherParts(ctx context.Context, parts []miniBatchPart, metrics map[string]bool) (miniBatchPart, error) {
	n, v := dp.Comm.Size(), dp.Shards
	return dp.gatherPartsOf(ctx, parts, metrics, func(s int) int { return owner(s, v, n) })
}

// gatherPartsOf is gatherParts with shard s computed by rank owner(s).
func (dp *DataParallel) gatherPartsOf(ctx context.Context, parts []miniBatchPart, metrics map[string]bool, owner func(s int) int) (miniBatchPart, error) {
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	// Every part as numbers: loss, tokens, micro-batches, then the
	// metrics in name order (a metric a shard lacks is 0).
	names := make([]string, 0, len(metrics))
	for k := range metrics {
		names = append(names, k)
	}
	slices.Sort(names)
	width := 3 + len(names)
	var mine []float64
	counts := make([]int, n)
	for s := range v {
		counts[owner(s)] += width
		if owner(s) != rank {
			continue
		}
		p := parts[s]
		mine = append(mine, p.loss, float64(p.tokens), float64(p.micro))
		for _, k := range names {
			mine = append(mine, p.metrics[k])
		}
	}
	all, err := dp.allGatherFloat64(ctx, mine, counts)
	if err != nil {
		return miniBatchPart{}, fmt.Errorf("trainer: gathering the step's statistics: %w", err)
	}
	// all holds rank 0's shards' rows in shard order, then rank 1's...
	at := make([]int, n)
	for r := 1; r < n; r++ {
		at[r] = at[r-1] + counts[r-1]
	}
	out := miniBatchPart{metrics: map[string]float64{}}
	for s := range v {
		r := owner(s)
		row := all[at[r] : at[r]+width]
		at[r] += width
		out.loss += row[0]
		out.tokens += int(row[1])
		out.micro += int(row[2])
		for i, k := range names {
			if row[2] > 0 {
				out.metrics[k] += row[3+i]
			}
		}
	}
	return out, nil
}

// zero2Piece is the most floats of the gradient one exchange of ZeRO
// stage 2 carries (16 MiB): a run larger than it, such as the embedding,
// goes in pieces, so that the partial sum's copy and the receive buffer of
// an exchange stay this small. Every rank cuts the runs the same way (a
// variable for the tests, which cut finer).
var zero2Piece = 1 << 22

// runReducer is ZeRO stage 2's reduction: it sums, run by run of the
// model's gradient buffer, the rank's partial (the tree of its shards'
// gradients with the last shard's read in place, then rest empty shards)
// and exchanges it with the group, leaving the rank's elements of the
// total in dp.grad. The elementwise sums are sumTree's and reduce's, in
// their order, so the bits are those of stage 1's tree.sum and reduce.
type runReducer struct {
	dp   *DataParallel
	ctx  context.Context
	tree *sumTree  // the rank's earlier shards' sums (nil leaves included)
	leaf []float32 // the last shard's gradient, nil when the rank had none
	rest int
	err  error // the first failure; later runs are skipped
}

func (dp *DataParallel) newRunReducer(ctx context.Context, tree *sumTree, leaf []float32, rest int) *runReducer {
	rank := dp.Comm.Rank()
	if k := dp.start[rank+1] - dp.start[rank]; len(dp.gradBuf) != k {
		dp.gradBuf = make([]float32, k)
	}
	dp.grad = dp.gradBuf
	return &runReducer{dp: dp, ctx: ctx, tree: tree, leaf: leaf, rest: rest}
}

// reduceRun reduces run i of the model's gradient runs, a piece at a time.
func (z *runReducer) reduceRun(i int) {
	r := z.dp.runs[i]
	for lo := r.Off; lo < r.Off+r.Len && z.err == nil; lo += zero2Piece {
		hi := min(lo+zero2Piece, r.Off+r.Len)
		if err := z.dp.exchangePiece(z.ctx, z.partial(lo, hi), lo, hi); err != nil {
			z.err = fmt.Errorf("trainer: reducing the gradients (elements %d to %d): %w", lo, hi, err)
		}
	}
}

// partial is elements [lo, hi) of the rank's partial sum (nil: zeros):
// the tree's pushes and sum on those elements alone.
func (z *runReducer) partial(lo, hi int) []float32 {
	var t sumTree
	for _, nd := range z.tree.stack {
		if nd.sum != nil {
			nd.sum = nd.sum[lo:hi]
		}
		t.stack = append(t.stack, nd)
	}
	if z.leaf != nil {
		t.pushBorrowed(z.leaf[lo:hi])
	}
	for range z.rest {
		t.push(nil)
	}
	return t.sum()
}

// exchangePiece sends every rank its elements of partial (elements [lo,
// hi) of this rank's partial sum; nil is zeros), receives every rank's
// partial of its own elements in [lo, hi), and adds them in rank order
// into dp.grad, as reduce does for the whole.
func (dp *DataParallel) exchangePiece(ctx context.Context, partial []float32, lo, hi int) error {
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	if n == 1 {
		if partial == nil {
			clear(dp.grad[lo:hi])
		} else {
			copy(dp.grad[lo:hi], partial)
		}
		return nil
	}
	overlap := func(j int) (int, int) { return max(lo, dp.start[j]), max(lo, min(hi, dp.start[j+1])) }
	myLo, myHi := overlap(rank)
	m := max(0, myHi-myLo)
	send, recv := make([]int, n), make([]int, n)
	for j := range n {
		a, b := overlap(j)
		send[j], recv[j] = max(0, b-a), m
	}
	if partial == nil {
		partial = make([]float32, hi-lo)
	}
	buf := make([]float32, n*m)
	dp.Sent += 4 * int64(hi-lo-m)
	if err := dp.Comm.AllToAll(ctx, collective.Float32s(partial), send, collective.Float32s(buf), recv); err != nil {
		return err
	}
	if m == 0 {
		return nil
	}
	var t sumTree
	for j := range n {
		t.push(buf[j*m : (j+1)*m])
	}
	copy(dp.grad[myLo-dp.start[rank]:], t.sum())
	return nil
}
