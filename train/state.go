package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/train/rankgroup"
)

// trainState is a run's training state after step steps: the policy (its
// float32 weights on the host), the optimiser and, while it trains, the
// learner's passes on the configured backend, which hold the parameters
// and the optimiser's moments where they compute (on a GPU, there).
type trainState struct {
	step int64
	pol  *Policy
	opt  *optim.AdamW
	// The optimiser state still to be put where the passes keep it: the
	// optimizer.bin of checkpoint optFrom (streamed), or optBytes (parked
	// on the host); neither when opt or the passes hold it.
	optFrom  string
	optBytes []byte
	l        *trainer.Learner // the passes, or nil
	on       string           // the setting l runs with
	cpu      bool             // l runs on the CPU: opt holds the moments
	synced   bool             // the host weights are l's (no step since syncParams)
	free     func()
	// ranks, when set, makes l a rank of a data-parallel group, whose
	// share of the optimiser state dp keeps between steps (not opt).
	ranks *rankgroup.Ranks
	group trainer.DPConfig // how the group splits and reduces a step (learnSession.groupConfig)
	dp    *trainer.DataParallel
	// refShare, when set, gives this rank's share of the reference
	// (learnSession.referenceShare), which a stage-3 group on a device
	// places from the host in place of the whole reference.
	refShare func(ctx context.Context, bf16 bool) (*trainer.ReferenceShare, error)
}

// learner returns the learner's passes for cfg (learner.backend,
// learner.precision, the reference when the loss has a KL term,
// learner.activation_checkpointing), opening them, and restoring the
// optimiser's state into them, when they are not open with that setting.
func (st *trainState) learner(ctx context.Context, cfg runconfig.Config, ref func(context.Context) (*model.Model, error)) (*trainer.Learner, error) {
	if err := st.opt.SetConfig(cfg.Learner.Optim); err != nil {
		return nil, err
	}
	if st.dp != nil {
		// The group's share of the optimiser keeps its own copy of the
		// hyper-parameters between steps.
		if err := st.dp.SetOptimConfig(cfg.Learner.Optim); err != nil {
			return nil, err
		}
	}
	kl := cfg.Learner.Loss.KLCoef != 0
	on := fmt.Sprint(cfg.Learner.Backend, "/", cfg.Learner.Precision, "/", kl)
	if st.l == nil || st.on != on {
		if err := st.park(); err != nil {
			return nil, err
		}
		l := &trainer.Learner{Policy: st.pol.Model, Opt: st.opt}
		cpu := cfg.Learner.Backend == runconfig.BackendCPU
		if err := checkLoRAPolicy(cfg, st.step, st.pol.Model); err != nil {
			return nil, err
		}
		// At stage 3 the group takes the passes before any of them
		// runs: a device that can opens them without the models'
		// weights, and the group places each rank's share of the
		// policy, then of the reference, so that no device holds the
		// whole policy and reference at start-up, nor a LoRA policy's
		// whole base (trainer.Learner.OnSharded).
		sharded := st.ranks != nil && st.group.Zero == 3
		switch {
		case kl && !st.pol.Model.HasAdapter() && sharded && !cpu && st.refShare != nil:
			// On the devices the rank's share of the reference is
			// kept on the host from one step to the next and placed
			// from there: the whole reference is not loaded again.
			rs, err := st.refShare(ctx, cfg.Learner.Precision == backend.BF16)
			if err != nil {
				return nil, fmt.Errorf("reference policy: %w", err)
			}
			l.RefShare = rs
		case kl && !st.pol.Model.HasAdapter():
			// (A LoRA policy's reference is its base: the adapter off.)
			// On the CPU the passes read the host copy; a device holds
			// its own, and the host's goes.
			r, err := ref(ctx)
			if err != nil {
				return nil, fmt.Errorf("reference policy: %w", err)
			}
			l.Ref = r
		}
		local := 0
		if st.ranks != nil {
			local = st.ranks.Group.Env().LocalRank
		}
		free, ordinal, err := onBackend(l, cfg.Learner.Backend, cfg.Learner.Precision, local, sharded)
		if err != nil {
			return nil, fmt.Errorf("learner.backend %s: %w", cfg.Learner.Backend, err)
		}
		if !cpu {
			l.Ref = nil
		}
		// learner.objective rejection-sft takes SFTStep, the model's own
		// optimiser step: one process takes it outside any group (and a
		// group refuses it at its first step).
		if st.ranks != nil || cfg.Learner.Objective != runconfig.ObjectiveRejectionSFT {
			if err := st.joinGroup(ctx, l, ordinal); err != nil {
				free()
				return nil, err
			}
		}
		if err := st.restoreOptimizer(ctx, l); err != nil {
			free()
			return nil, fmt.Errorf("optimiser state of checkpoint %d: %w", st.step, err)
		}
		st.l, st.on, st.free, st.cpu = l, on, free, cpu
	}
	ckpt, err := trainer.UseCheckpointing(trainer.MemoryConfig{Model: st.pol.Model.Config(), Backend: cfg.Learner.Backend,
		Precision: cfg.Learner.Precision, MicroBatchTokens: cfg.Learner.MicroBatchTokens, Checkpointing: cfg.Learner.ActivationCheckpointing})
	if err != nil {
		return nil, fmt.Errorf("learner.activation_checkpointing: %w", err)
	}
	st.l.SetCheckpointing(ckpt)
	if err := st.l.SetInputStore(cfg.Learner.ActivationCheckpointing == trainer.CheckpointingOffload); err != nil {
		return nil, fmt.Errorf("learner.activation_checkpointing: %w", err)
	}
	st.synced = false // a step follows
	return st.l, nil
}

// joinGroup makes l the group's rank: with the share of the optimiser
// state st kept from the step before, or a new one (restored next). On a
// device whose passes can (backend.DeviceReduced) the ranks reduce the
// gradients and keep their shares of the moments on the devices, over the
// group's NCCL communicator on device ordinal (rankgroup.Ranks.DeviceComm);
// other devices bring them to the host (backend.HostReduced).
//
// A process that takes its steps alone is the one rank of its own group
// (trainer.Learner.EnableSingle): the same step function, and the bits of
// any group that divides the run's virtual shards.
func (st *trainState) joinGroup(ctx context.Context, l *trainer.Learner, ordinal int) error {
	if st.dp != nil {
		l.DP = st.dp
		return nil
	}
	group := st.group
	if st.ranks == nil {
		if err := l.EnableSingle(group); err != nil {
			return err
		}
		st.dp = l.DP
		return nil
	}
	if _, ok := l.PolicyCompute.(backend.DeviceReduced); ok {
		dc, err := st.ranks.DeviceComm(ctx, ordinal)
		if err != nil {
			return err
		}
		group.DeviceComm = dc
	}
	if err := l.EnableDataParallel(st.ranks.Comm, group); err != nil {
		return err
	}
	st.dp = l.DP
	return nil
}

// restoreOptimizer streams the optimiser state still to be restored into
// where l's step keeps it (host memory, or the device); an empty state (a
// checkpoint written before any step) leaves the optimiser fresh.
func (st *trainState) restoreOptimizer(ctx context.Context, l *trainer.Learner) error {
	var r io.Reader
	switch {
	case st.optBytes != nil:
		r = bytes.NewReader(st.optBytes)
	case st.optFrom != "" && l.DP != nil:
		// A rank reads the parts that hold its share when the state was
		// written in parts (by a group of any size).
		parts, err := checkpoint.OpenOptimizerParts(ctx, st.optFrom)
		if err != nil {
			return err
		}
		if parts != nil {
			if err := l.ReadOptimizerParts(parts.Index, parts.Open); err != nil {
				return err
			}
			st.optFrom = ""
			return nil
		}
		fallthrough
	case st.optFrom != "":
		rc, err := checkpoint.OpenOptimizer(ctx, st.optFrom)
		if err != nil {
			return err
		}
		defer rc.Close()
		r = rc
	default:
		return nil
	}
	br := bufio.NewReaderSize(r, 1<<16)
	if _, err := br.Peek(1); err != io.EOF {
		if err := l.ReadOptimizer(br); err != nil {
			return err
		}
	}
	st.optFrom, st.optBytes = "", nil
	return nil
}

// syncParams makes the host policy's weights those the passes hold.
func (st *trainState) syncParams() error {
	if st.l == nil || st.synced {
		return nil
	}
	if err := st.l.SyncPolicy(); err != nil {
		return err
	}
	st.synced = true
	return nil
}

// writeOptimizer streams the optimiser's state, in learner/optim's
// format, from where it is kept.
func (st *trainState) writeOptimizer(w io.Writer) error {
	switch {
	case st.l != nil:
		return st.l.WriteOptimizer(w)
	case st.dp != nil:
		return st.dpLearner().WriteOptimizer(w)
	case st.optBytes != nil:
		_, err := w.Write(st.optBytes)
		return err
	case st.optFrom != "":
		r, err := checkpoint.OpenOptimizer(context.Background(), st.optFrom)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}
	_, err := st.opt.WriteTo(w)
	return err
}

// dpLearner is the learner whose DP is this rank's share of the group's
// optimiser state: the passes when open, else one over the host policy.
func (st *trainState) dpLearner() *trainer.Learner {
	if st.l != nil {
		return st.l
	}
	return &trainer.Learner{Policy: st.pol.Model, Opt: st.opt, DP: st.dp}
}

// optimizerParts makes ck's optimiser state, in a group of several ranks,
// this rank's part of it: each rank writes the moments it owns
// (optimizer-0000r-of-0000N.bin) and rank 0 the index, so nothing is
// gathered; a group of any size, or one process, reads them back.
func (st *trainState) optimizerParts(ck *checkpoint.Checkpoint) error {
	if st.dp == nil || st.dp.Comm.Size() < 2 {
		return nil
	}
	l := st.dpLearner()
	// (At ZeRO stage 3 the ranks lay their parts out together first.)
	if err := l.PrepareOptimizerParts(context.Background()); err != nil {
		return err
	}
	idx, err := json.Marshal(l.OptimizerIndex(checkpoint.OptimizerPartName))
	if err != nil {
		return err
	}
	ck.OptimizerParts, ck.OptimizerPart, ck.OptimizerIndex = st.dp.Comm.Size(), st.dp.Comm.Rank(), idx
	ck.Optimizer, ck.WriteOptimizer = nil, l.WriteOptimizerPart
	return nil
}

// park ends the step's hold on memory: it brings what the passes hold
// back to the host and closes them. On a device the weights come back and
// the optimiser state is kept as bytes (a group's rank keeps its share on
// the host, in dp, already), freeing the device for the rollout engine
// between steps. On the CPU the optimiser keeps its moments and the
// policy its weights alone: its gradients, its activation buffers and the
// reference do not stay through the rollout.
func (st *trainState) park() error {
	if st.l == nil {
		return nil
	}
	err := st.syncParams()
	if err == nil && st.dp != nil {
		// The rank's moments come to the host before the device goes.
		err = st.l.ParkDevice()
	}
	cpu := st.cpu
	if err == nil && !cpu && st.dp == nil {
		// (A group's rank keeps its share of the state on the host, in
		// st.dp, whatever the passes' device.)
		var b bytes.Buffer
		if err = st.l.WriteOptimizer(&b); err == nil {
			st.optBytes = b.Bytes()
		}
	}
	st.free()
	st.l, st.on, st.free = nil, "", nil
	if err == nil && (cpu || st.dp != nil) {
		// The policy keeps its weights; its gradients (on a device, a
		// group rank's host copy of them), its pass buffers and the
		// reference are garbage now, handed back to the system at once
		// (the rollout engine may be another process).
		st.pol.Model.ReleaseBuffers()
		debug.FreeOSMemory()
	}
	return err
}

// close frees the passes without bringing anything back.
func (st *trainState) close() {
	if st != nil && st.free != nil {
		if st.dp != nil {
			// The group's device memory goes before the device (its
			// moments are not needed: nothing follows).
			st.l.ParkDevice()
		}
		st.free()
		st.l, st.on, st.free = nil, "", nil
	}
}

// learnSession runs the learner steps of one run and keeps the training
// state in memory from one step to the next, so that a run writes the full
// state (float32 masters and optimiser) only every checkpoint.save_every
// steps. When the state it holds is not the one a step starts from (a new
// process, a resumed run), it loads checkpoint k when that is a full one;
// otherwise it loads the newest full state before k and replays the
// learner steps from there to k on their committed trajectories, each
// under the configuration it ran with, checking every replayed step's
// weights against the checkpoint it committed (checkpoint.SameWeights).
// The learner is deterministic, so the replayed state is the one the
// interrupted run held, bit for bit. Between steps (while the rollout
// runs) it holds, on the host, the float32 weights and the optimiser's
// moments alone: 12 bytes a parameter.
type learnSession struct {
	cfg  runconfig.Config
	logf func(string)
	st   *trainState // nil: none held
	// ranks, when set, is the data-parallel group the steps are taken
	// in: rank 0 announces each step and writes, the others follow.
	ranks *rankgroup.Ranks
	// refShare is this rank's share of the reference, kept from the
	// first step on at ZeRO stage 3 on a device (referenceShare).
	refShare *trainer.ReferenceShare
}

// groupConfig is how the session's group of ranks splits and reduces a
// step under its configuration (learner.zero, learner.deterministic): what
// rank 0 announces with each step and every rank's DataParallel uses.
//
// One process (no --nproc) is the one rank of its own group at stage 1
// with one virtual shard (trainer.SingleShards), whatever learner.zero
// and learner.deterministic say: its gradient summed and stepped in place,
// no buffer beside the one-process step's (8 shards would hold three
// full-size sums). aipo train --nproc 1 is the group of one with the
// groups' shards, whose bits are those of every --nproc N.
func (s *learnSession) groupConfig() trainer.DPConfig {
	if s.ranks == nil {
		return trainer.DPConfig{Zero: 1, Shards: trainer.SingleShards}
	}
	return trainer.DPConfig{Zero: s.cfg.Learner.Zero, Shards: s.cfg.Learner.DPShards(s.ranks.Group.Size()), KeepGathered: s.cfg.Learner.KeepGathered()}
}

func newLearnSession(cfg runconfig.Config, logf func(string)) *learnSession {
	return &learnSession{cfg: cfg, logf: logf}
}

func (s *learnSession) log(format string, args ...any) {
	if s.logf != nil {
		s.logf(fmt.Sprintf(format, args...))
	}
}

// Learn runs learner step k (see the package-level Learn), then removes
// the checkpoints the run keeps no longer (applyRetention). ctx carries
// the run's lease.
func (s *learnSession) Learn(ctx context.Context, k int64) (records.Learn, error) {
	runDir := s.cfg.Run.Dir
	leader := s.ranks.Leader()
	if leader {
		if err := runlease.Require(ctx, runDir); err != nil {
			return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
		}
		if done, err := learned(ctx, runDir, k); err != nil || done {
			if err != nil {
				return records.Learn{}, err
			}
			return readLearnRecord(ctx, runDir, k)
		}
		if s.ranks != nil {
			g := s.groupConfig()
			if err := s.ranks.Announce(ctx, rankgroup.Command{Op: "learn", Step: k, Zero: g.Zero, Shards: g.Shards, KeepGathered: g.KeepGathered}); err != nil {
				return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
			}
		}
	}
	if s.sharesReference() && (s.st == nil || s.st.step != k) {
		// The reference's share is taken before the policy's state is
		// loaded (stateAt), so that the whole reference and the whole
		// policy are never on the host together.
		if _, err := s.referenceShare(ctx, s.cfg.Learner.Precision == backend.BF16); err != nil {
			return records.Learn{}, fmt.Errorf("learn step %d: reference policy: %w", k, err)
		}
	}
	st, err := s.stateAt(ctx, k)
	if err != nil {
		return records.Learn{}, err
	}
	// Whatever fails from here on may leave st half updated.
	s.st = nil
	met, err := learnStep(ctx, s.cfg, k, st, s.reference)
	if err == nil {
		// A LoRA run's state is the adapter and its moments, a few
		// megabytes: every checkpoint holds it whole.
		full := s.cfg.Checkpoint.FullAt(k+1, s.cfg.Run.Steps) || s.cfg.LoRAOn()
		if leader {
			met, err = finishLearn(ctx, s.cfg, k, st, full, met, s.logf)
		} else {
			err = followFinish(ctx, s.cfg, st, full)
		}
	}
	if err == nil {
		// Until the next step the memory is the rollout engine's.
		err = st.park()
	}
	if err != nil {
		st.close()
		return records.Learn{}, err
	}
	st.step = k + 1
	s.st = st
	if !leader {
		return met, nil
	}
	if err := applyRetention(ctx, s.cfg); err != nil {
		return records.Learn{}, err
	}
	return met, nil
}

// followFinish is a follower's part of committing the checkpoint after a
// step: its parameters are the group's already; it writes the weight
// shards it owns and, for a full checkpoint, its part of the optimiser
// state (rankgroup.Ranks.WriteShards).
func followFinish(ctx context.Context, cfg runconfig.Config, st *trainState, full bool) error {
	if err := st.syncParams(); err != nil {
		return err
	}
	m := st.pol.Model
	ck := checkpoint.Checkpoint{Config: m.Config(), Tensors: policyTensors(m), WriteTiedHead: writesTiedHead(cfg), ServingOnly: !full}
	var err error
	if ck.Adapter, err = adapterFiles(m); err != nil {
		return err
	}
	if full {
		if err := st.optimizerParts(&ck); err != nil {
			return err
		}
	}
	return st.ranks.WriteShards(ctx, ck, checkpoint.SaveOptions{MaxShardBytes: cfg.Checkpoint.MaxShardSize})
}

// Close frees what the session holds on the learner's backend.
func (s *learnSession) Close() {
	s.st.close()
	s.st = nil
}

// readLearnRecord reads the learner's record of step k.
func readLearnRecord(ctx context.Context, runDir string, k int64) (records.Learn, error) {
	var m records.Learn
	b, err := storage.ReadFile(ctx, rundir.MetricsRecord(runDir, rundir.LearnKind, k))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	return m, err
}

// learned reports whether step k was learned already: checkpoint k+1, or
// a later one, is committed (retention may have removed k+1 since).
func learned(ctx context.Context, runDir string, k int64) (bool, error) {
	if ok, err := checkpoint.Committed(ctx, rundir.Checkpoint(runDir, k+1)); err != nil || ok {
		return ok, err
	}
	steps, err := checkpoint.List(ctx, runDir)
	if err != nil {
		return false, err
	}
	return len(steps) > 0 && steps[len(steps)-1] > k, nil
}

// reference loads the reference policy (checkpoint 0).
func (s *learnSession) reference(ctx context.Context) (*model.Model, error) {
	ref, err := LoadPolicy(ctx, rundir.Checkpoint(s.cfg.Run.Dir, 0))
	if err != nil {
		return nil, err
	}
	return ref.Model, nil
}

// sharesReference reports whether the session's steps keep the rank's
// share of the reference on the host (referenceShare): a group at ZeRO
// stage 3 on a device, with a KL term, of a policy without a LoRA adapter.
func (s *learnSession) sharesReference() bool {
	return s.ranks != nil && s.groupConfig().Zero == 3 && s.cfg.Learner.Backend != runconfig.BackendCPU &&
		s.cfg.Learner.Loss.KLCoef != 0 && !s.cfg.LoRAOn()
}

// referenceShare is this rank's share of the reference (checkpoint 0),
// held for passes that multiply in bfloat16 when bf16, taken once (again
// only if learner.precision changes): the whole reference is loaded, the
// share taken a unit at a time, and the whole goes before anything else
// is loaded, so that the host holds the whole reference beside nothing
// but the share.
func (s *learnSession) referenceShare(ctx context.Context, bf16 bool) (*trainer.ReferenceShare, error) {
	if s.refShare != nil && s.refShare.Half() == bf16 {
		return s.refShare, nil
	}
	s.refShare = nil
	ref, err := s.reference(ctx)
	if err != nil {
		return nil, err
	}
	share, err := trainer.NewReferenceShare(ref, s.ranks.Comm.Size(), s.ranks.Comm.Rank(), bf16)
	if err != nil {
		return nil, err
	}
	debug.FreeOSMemory() // the whole reference (ref), before the policy is loaded
	s.refShare = share
	s.log("reference policy: rank %d keeps its share on the host (%d bytes), placed on its device from there each step", s.ranks.Comm.Rank(), share.Bytes())
	return share, nil
}

// stateAt returns the training state after k steps: the one held, the
// full checkpoint k, or the newest full checkpoint before k with the
// learner steps since replayed.
func (s *learnSession) stateAt(ctx context.Context, k int64) (*trainState, error) {
	if s.st != nil && s.st.step == k {
		return s.st, nil
	}
	s.Close()
	runDir := s.cfg.Run.Dir
	full, err := checkpoint.Full(ctx, rundir.Checkpoint(runDir, k))
	if err != nil {
		return nil, fmt.Errorf("learn step %d: %w", k, err)
	}
	from := k
	if !full {
		if from, err = newestFull(ctx, runDir, k); err != nil {
			return nil, err
		}
	}
	c, err := runconfig.At(ctx, s.cfg, from)
	if err != nil {
		return nil, err
	}
	pol, err := LoadPolicy(ctx, rundir.Checkpoint(runDir, from))
	if err != nil {
		return nil, fmt.Errorf("learn step %d: %w", k, err)
	}
	opt, err := optim.New(c.Learner.Optim)
	if err != nil {
		return nil, err
	}
	// The state is streamed where the passes keep it once they are open.
	st := &trainState{step: from, pol: pol, opt: opt, optFrom: rundir.Checkpoint(runDir, from), ranks: s.ranks}
	st.group = s.groupConfig()
	if s.sharesReference() {
		st.refShare = s.referenceShare
	}
	if from < k {
		s.log("resume: checkpoint %d holds the serving weights alone; replaying learner steps %d..%d from the full training state of checkpoint %d", k, from, k-1, from)
	}
	for j := from; j < k; j++ {
		c, err := runconfig.At(ctx, s.cfg, j)
		if err != nil {
			return nil, err
		}
		if _, err := learnStep(ctx, c, j, st, s.reference); err != nil {
			st.close()
			return nil, fmt.Errorf("resume: replay of %w", err)
		}
		st.step = j + 1
		if err := st.syncParams(); err != nil {
			st.close()
			return nil, err
		}
		next := rundir.Checkpoint(runDir, j+1)
		ok, err := checkpoint.Committed(ctx, next)
		if err != nil {
			st.close()
			return nil, err
		}
		if !ok {
			continue // removed by retention: nothing to check against
		}
		m := st.pol.Model
		served := checkpoint.Checkpoint{Config: m.Config(), Tensors: trainer.Tensors(m), WriteTiedHead: writesTiedHead(s.cfg)}.ServedTensors()
		if err := checkpoint.SameWeights(ctx, next, served, c.Checkpoint.MaxShardSize); err != nil {
			st.close()
			why := fmt.Sprintf("the learner is not deterministic on this machine (learner.backend %s, learner.precision %s)", c.Learner.Backend, c.Learner.Precision)
			if rec, rerr := readLearnRecord(ctx, runDir, j); rerr == nil && rec.Group == nil && rec.Tokens > 0 {
				why = fmt.Sprintf("step %d's record names no group: an aipo from before one process took its steps as a group of one wrote it, whose one-process steps packed and summed the mini-batch as today's need not (pi_old across mini-batches, the optimiser's own norm), so a later aipo cannot promise their bits (finish the run with the aipo that began it, or go on as follows)", j)
			}
			return nil, fmt.Errorf("resume: replaying learner step %d from the full state of checkpoint %d did not give the weights of checkpoint %d, which the run committed (%w); %s. Go on from checkpoint %d by removing the checkpoints after it (and their steps' trajectories, step-%06d onwards), or from the newest full state otherwise; set checkpoint.save_every: 1 to write the full state every step",
				j, from, j+1, err, why, from, from)
		}
	}
	return st, nil
}

// newestFull is the newest committed full checkpoint of runDir before k.
func newestFull(ctx context.Context, runDir string, k int64) (int64, error) {
	steps, err := checkpoint.List(ctx, runDir)
	if err != nil {
		return 0, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i] >= k {
			continue
		}
		full, err := checkpoint.Full(ctx, rundir.Checkpoint(runDir, steps[i]))
		if err != nil {
			return 0, err
		}
		if full {
			return steps[i], nil
		}
	}
	return 0, fmt.Errorf("learn step %d: checkpoint %d holds the serving weights alone and no earlier checkpoint of %s holds the full training state to resume from (checkpoints: %v); start the run again from checkpoint 0", k, k, runDir, steps)
}

// applyRetention removes, under the run's lease, the committed checkpoints
// that Retained does not keep, and what unfinished saves or removals left
// below the newest committed checkpoint. Nothing the run still needs goes:
// a resumed run starts from the newest full state and replays from the
// committed trajectories, which are never removed.
func applyRetention(ctx context.Context, cfg runconfig.Config) error {
	p := cfg.Checkpoint
	runDir := cfg.Run.Dir
	steps, err := checkpoint.List(ctx, runDir)
	if err != nil || len(steps) == 0 {
		return err
	}
	if err := removeLeftovers(ctx, runDir, steps[len(steps)-1]); err != nil {
		return err
	}
	if p.KeepLast == 0 {
		return nil
	}
	var ferr error
	full := func(k int64) bool {
		ok, err := checkpoint.Full(ctx, rundir.Checkpoint(runDir, k))
		if err != nil && ferr == nil {
			ferr = err
		}
		return ok
	}
	open := func(k int64) bool {
		ok, err := stillSamples(ctx, cfg, k)
		if err != nil && ferr == nil {
			ferr = err
		}
		return ok
	}
	keep := p.Retained(steps, full, open)
	if ferr != nil {
		return fmt.Errorf("checkpoint retention in %s: %w", runDir, ferr)
	}
	for _, k := range steps {
		if keep[k] {
			continue
		}
		if err := checkpoint.Remove(ctx, rundir.Checkpoint(runDir, k)); err != nil {
			return fmt.Errorf("checkpoint retention in %s (checkpoint.keep_last %d, keep_every %d): %w", runDir, p.KeepLast, p.KeepEvery, err)
		}
	}
	return nil
}

// stillSamples reports whether checkpoint k samples a step that is not
// committed: step k, or in an asynchronous run step k+1 (run.async: step j
// is sampled by checkpoint j-1). Such a checkpoint is kept whether or not
// its rollout has begun: in an asynchronous run the rollout of step k+1
// may be starting while learner step k commits checkpoint k+1 and prunes,
// and a run killed then resumes by rolling step k+1 out from checkpoint k.
func stillSamples(ctx context.Context, cfg runconfig.Config, k int64) (bool, error) {
	j := k
	if cfg.Run.Async {
		j = k + 1
	}
	if j >= cfg.Run.Steps {
		return false, nil
	}
	ok, err := storage.Exists(ctx, rundir.Manifest(rundir.Step(cfg.Run.Dir, j)))
	return !ok, err
}

// removeLeftovers removes the uncommitted checkpoint directories below
// step newest that hold a trainer state (a save or a removal on gs:// cut
// short; locally such leftovers are temporaries that Claim sweeps).
func removeLeftovers(ctx context.Context, runDir string, newest int64) error {
	paths, err := storage.List(ctx, rundir.CheckpointFiles(runDir, checkpoint.TrainerStateName))
	if err != nil {
		return err
	}
	for _, p := range paths {
		dir := storage.Dir(p)
		k, ok := rundir.ParseStepName(storage.Base(dir))
		if !ok || k >= newest {
			continue
		}
		if ok, err := checkpoint.Committed(ctx, dir); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		if err := checkpoint.RemoveUncommitted(ctx, dir); err != nil {
			return err
		}
	}
	return nil
}
