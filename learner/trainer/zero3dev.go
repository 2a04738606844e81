package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/optim"
)

// ZeRO stage 3 on the devices (zero3.dev): the passes' device model is
// sharded and its group (backend.ShardedGroup) keeps the rank's owned
// elements, their reduced gradient and AdamW moments on the device,
// gathering each unit's weights and reducing each unit's gradient over
// the device communicator as the passes reach them. The schedule is the
// host stage 3's (zero3, zero3step.go): the same ownership, slots,
// rounds and trees, so the update is the same bits at 1, 2 and 4 ranks.
// The host keeps a copy of the rank's weights and moments (zero3.master,
// zero3.opt) that is brought up to date only when something reads it: a
// checkpoint, GatherPolicy, the passes being closed (ParkDevice); what is
// loaded into it goes to the device. The host model keeps its whole
// weights, which stand for the policy after SyncPolicy until the next
// step (a checkpoint may be loaded into them).

// devMode reports whether stage 3 runs on the devices.
func (z *zero3) devMode() bool { return z.devComm != nil }

// enableZero3Device makes dp a stage-3 rank on the devices.
func (l *Learner) enableZero3Device(dp *DataParallel) error {
	if dp.dev.comm == nil {
		return errors.New("trainer: ZeRO stage 3 with the passes on a device exchanges the weights and gradients over a device communicator: give DPConfig.DeviceComm (NCCL)")
	}
	if _, ok := l.PolicyCompute.(backend.DeviceSharded); !ok {
		return fmt.Errorf("trainer: the passes of this device (%T) cannot be sharded (ZeRO stage 3 on the devices): use stage 1 or 2", l.PolicyCompute)
	}
	if l.Policy == nil || !dp.flatParams {
		return errors.New("trainer: ZeRO stage 3 shards the host model's flat parameter buffer; this learner's parameters are not in one")
	}
	z, err := newZero3(l.Policy.Config(), dp.Comm.Size(), dp.Comm.Rank(), l.Policy.ParamData(), l.Opt.Config())
	if err != nil {
		return err
	}
	z.opt.SetSteps(l.Opt.Steps())
	z.devComm = dp.dev.comm
	// The host's copy of the reduced gradient is never used.
	z.grad = nil
	dp.z3 = z
	_, err = l.openZero3(z)
	return err
}

// zero3Group is the stage-3 group on the passes' device, opened (with
// the host's copy of the rank's weights and moments) for the passes
// open now.
func (l *Learner) zero3Group() (backend.ShardedGroup, error) { return l.openZero3(l.DP.z3) }

// openZero3 is zero3Group for z.
func (l *Learner) openZero3(z *zero3) (backend.ShardedGroup, error) {
	if z.dev != nil && z.devOf == l.PolicyCompute {
		return z.dev, nil
	}
	ds, ok := l.PolicyCompute.(backend.DeviceSharded)
	if !ok {
		return nil, fmt.Errorf("trainer: the passes of this device (%T) cannot be sharded (ZeRO stage 3 on the devices)", l.PolicyCompute)
	}
	z.dev = nil
	lay := backend.ShardLayout{Parts: z.own}
	for _, u := range z.units {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
	}
	if z.master == nil {
		// Let go while the host model held the weights whole
		// (dropMaster): its elements are the rank's share.
		z.ensureMaster()
		z.takeWeights(z.self, l.Policy.ParamData())
	}
	g, err := ds.ShardedGroup(z.devComm, lay, z.master)
	if err != nil {
		return nil, err
	}
	z.dev, z.devOf = g, l.PolicyCompute
	return g, z.momentsTransfer(true)
}

// momentsTransfer copies the rank's moments between the host's optimiser
// shard and the device (toDevice: host to device): straight from the
// shard's flat moments, which lie as the rank's elements do in master
// (its chunks in order), or, where they do not, through a staging buffer
// of one moment of the rank's elements.
func (z *zero3) momentsTransfer(toDevice bool) error {
	if z.dev == nil {
		return nil
	}
	flat := [2][]float32{}
	flat[0], flat[1] = z.opt.Flat()
	k := z.elements(z.self)
	inOrder := len(flat[0]) == k
	for i := range z.mine {
		m, _ := z.opt.Moments(i)
		inOrder = inOrder && len(m) > 0 && &m[0] == &flat[0][z.mineAt(i)]
	}
	var vals []float32
	for moment := range 2 {
		if inOrder {
			if err := z.dev.Moments(moment, flat[moment], toDevice); err != nil {
				return fmt.Errorf("trainer: the optimiser's moments between the host and the device: %w", err)
			}
			continue
		}
		if vals == nil {
			vals = make([]float32, k)
			z.staged = max(z.staged, 4*int64(cap(vals)))
		}
		if !toDevice {
			if err := z.dev.Moments(moment, vals, false); err != nil {
				return fmt.Errorf("trainer: the optimiser's moments from the device: %w", err)
			}
		}
		for i := range z.mine {
			at := z.mineAt(i)
			m, v := z.opt.Moments(i)
			dst := m
			if moment == 1 {
				dst = v
			}
			if toDevice {
				copy(vals[at:], dst)
			} else {
				copy(dst, vals[at:at+len(dst)])
			}
		}
		if toDevice {
			if err := z.dev.Moments(moment, vals, true); err != nil {
				return fmt.Errorf("trainer: the optimiser's moments to the device: %w", err)
			}
		}
	}
	return nil
}

// mineAt is where the i-th chunk the rank owns lies in master.
func (z *zero3) mineAt(i int) int { return z.local0(z.self, z.flatStart(z.mine[i])) }

// HostMemory is what this rank of a stage-3 group on the devices holds
// on its host besides the host model, measured on the buffers it holds
// now (their capacities): the host's copy of its share (weights and
// moments), the most its moments' transfers staged beside them, and the
// optimiser's parts laid out for a checkpoint; at other stages, or on
// the host, zero. PlanHostOnDevices is what it plans.
func (dp *DataParallel) HostMemory() HostOnDevices {
	z := dp.z3
	if z == nil || !z.devMode() {
		return HostOnDevices{}
	}
	h := HostOnDevices{Rank: dp.Comm.Rank(), Elements: int64(len(z.master)), Weights: 4 * int64(cap(z.master)), Staging: z.staged}
	for i := range z.mine {
		m, v := z.opt.Moments(i)
		h.Moments += 4 * int64(cap(m)+cap(v))
	}
	h.Weights += 4 * int64(cap(z.grad))
	h.Parts = 4 * int64(cap(z.parted[0])+cap(z.parted[1]))
	return h
}

// fromDevice brings the rank's weights and moments to the host's copy
// (the weights not while the host model holds them whole: hostHolds,
// when the device's are theirs).
func (z *zero3) fromDevice() error {
	if !z.devMode() || z.dev == nil {
		return nil
	}
	if !z.hostHolds {
		if err := z.dev.Master(z.master, false); err != nil {
			return fmt.Errorf("trainer: the rank's weights from the device: %w", err)
		}
	}
	return z.momentsTransfer(false)
}

// dropMaster lets the host's copy of the rank's weights go while the host
// model holds the weights whole (hostHolds, set by unshard): its elements
// are the rank's share of them, and come back from there (reshard,
// openZero3), so the host does not hold them twice between steps.
func (z *zero3) dropMaster() {
	if z.devMode() && z.hostHolds {
		z.master, z.local = nil, nil
	}
}

// ensureMaster allocates the host's copy of the rank's weights again
// after dropMaster (its optimiser's views with it); its values are the
// caller's to fill.
func (z *zero3) ensureMaster() {
	if z.master != nil {
		return
	}
	z.master = make([]float32, z.elements(z.self))
	for i, c := range z.mine {
		at, n := z.mineAt(i), z.chunks[c].Len()
		z.local = append(z.local, optim.Param{Name: z.names[z.chunks[c].Param], Data: z.master[at : at+n : at+n]})
	}
}

// masterToDevice sends the host's copy of the rank's weights to the
// device.
func (z *zero3) masterToDevice() error {
	if !z.devMode() || z.dev == nil {
		return nil
	}
	if err := z.dev.Master(z.master, true); err != nil {
		return fmt.Errorf("trainer: the rank's weights to the device: %w", err)
	}
	return nil
}

// parkZero3 brings the rank's state to the host and closes the group
// before the passes are closed.
func (dp *DataParallel) parkZero3() error {
	z := dp.z3
	if z == nil || !z.devMode() || z.dev == nil {
		return nil
	}
	err := z.fromDevice()
	err = errors.Join(err, z.dev.Close())
	z.dev, z.devOf = nil, nil
	// A checkpoint's optimiser parts were written before the passes
	// are parked: their layout goes now rather than with the next step.
	z.parted = [2][]float32{}
	return err
}

// scoreZero3Device is scoreZero3 on the devices.
func (l *Learner) scoreZero3Device(ctx context.Context, groups [][][]int, seqs []Sequence, budget int, old [][]float32) error {
	g, err := l.zero3Group()
	if err != nil {
		return err
	}
	if err := l.scoreShardedDevice(ctx, g, l.policy(), groups, seqs, budget, old, ownerZero3(l.DP.Comm.Size())); err != nil {
		return fmt.Errorf("trainer: pi_old: %w", err)
	}
	return nil
}

// scoreShardedDevice scores this rank's shards (ownerOf) with the passes
// c of a model sharded on the devices, fed by g, into out: every rank
// runs as many passes as the rank with the most micro-batches, a Shadow
// where it has none left, so that the gathers stay in step.
func (l *Learner) scoreShardedDevice(ctx context.Context, g backend.ShardedScorer, c Compute, groups [][][]int, seqs []Sequence, budget int, out [][]float32, ownerOf func(s int) int) error {
	dp := l.DP
	n, rank := dp.Comm.Size(), dp.Comm.Rank()
	counts := make([]int, n)
	var mine []microBatch
	for mb := range groups {
		for s, order := range groups[mb] {
			r := ownerOf(s)
			k := pack(seqs, order, budget)
			counts[r] += len(k)
			if r == rank {
				mine = append(mine, k...)
			}
		}
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	for i := range most {
		g.BeginScore(ctx)
		if i >= len(mine) {
			if err := g.EndPass(g.Shadow(false)); err != nil {
				dp.Comm.Abort(err)
				return err
			}
			continue
		}
		mb := mine[i]
		all, err := c.Run(mb.batch, nil)
		if err := g.EndPass(err); err != nil {
			dp.Comm.Abort(err)
			return err
		}
		mb.split(out, seqs, all)
	}
	return nil
}

// miniBatchZero3Device is miniBatchZero3 on the devices: the same rounds
// and slots, the sums kept on the device by the group.
func (l *Learner) miniBatchZero3Device(ctx context.Context, cfg RLConfig, samples []RLSample, seqs []Sequence, shards [][]int, old, ref [][]float32) (miniBatchPart, error) {
	dp := l.DP
	n, rank, v := dp.Comm.Size(), dp.Comm.Rank(), dp.Shards
	mbs, inputs, counts, total, names, err := planShards(cfg, samples, seqs, shards, old, ref)
	if err != nil || total == 0 {
		return miniBatchPart{}, err
	}
	g, err := l.zero3Group()
	if err != nil {
		return miniBatchPart{}, err
	}
	trained := make([][]int, v)
	rounds := 0
	for s := range v {
		for b, x := range counts[s] {
			if x != 0 {
				trained[s] = append(trained[s], b)
			}
		}
		rounds = max(rounds, len(trained[s]))
	}
	parts := make([]miniBatchPart, v)
	for s := range parts {
		parts[s].metrics = map[string]float64{}
	}
	c := l.policy()
	fail := func(err error) (miniBatchPart, error) {
		dp.Comm.Abort(err)
		return miniBatchPart{}, err
	}
	g.BeginMiniBatch()
	slots := (v + n - 1) / n
	for j := range rounds {
		for t := range slots {
			size := min(n, v-t*n)
			has := make([]bool, size)
			for r := range size {
				has[r] = j < len(trained[t*n+r])
			}
			if !g.BeginSlot(ctx, has, slots == 1) {
				continue
			}
			s := t*n + rank
			if rank >= size || !has[rank] {
				if err := g.EndPass(g.Shadow(true)); err != nil {
					return fail(err)
				}
				continue
			}
			b := trained[s][j]
			w := counts[s][b] / total
			out, err := runMicroBatch(c, cfg.Loss, mbs[s][b], inputs[s][b], w)
			if err := g.EndPass(err); err != nil {
				return fail(err)
			}
			dp.Overlapped += int64(len(dp.z3.units) - 1)
			p := &parts[s]
			p.loss += w * out.Loss
			addMetrics(p.metrics, out.Metrics)
			p.micro++
			p.tokens += len(mbs[s][b].scored)
		}
		if err := g.EndRound(); err != nil {
			return fail(err)
		}
	}
	if err := g.EndMiniBatch(); err != nil {
		return fail(err)
	}
	return dp.gatherPartsOf(ctx, parts, names, func(s int) int { return owner3(s, n) })
}

// stepZero3Device is stepZero3 on the devices: each owned chunk's sum of
// squares on the device, the norm from every chunk's in chunk order, and
// AdamW on the device.
func (l *Learner) stepZero3Device(ctx context.Context) (float64, error) {
	dp := l.DP
	z := dp.z3
	g, err := l.zero3Group()
	if err != nil {
		return 0, err
	}
	runs := make([][2]int, len(z.mine))
	for i, c := range z.mine {
		at := z.mineAt(i)
		runs[i] = [2]int{at, at + z.chunks[c].Len()}
	}
	partial, err := g.SumSquares(runs)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	all, err := z.chunkSums(ctx, dp, partial)
	if err != nil {
		return 0, fmt.Errorf("trainer: gradient norm: %w", err)
	}
	var sum float64
	for _, x := range all {
		sum += x
	}
	norm := math.Sqrt(sum)
	if err := g.Step(z.opt.Config(), z.opt.Steps(), sum); err != nil {
		return norm, err
	}
	if !math.IsNaN(norm) && !math.IsInf(norm, 0) {
		z.opt.SetSteps(z.opt.Steps() + 1)
		l.Opt.SetSteps(z.opt.Steps())
	}
	return norm, nil
}
