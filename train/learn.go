package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/train/rankgroup"
	"github.com/aipo-rl/aipo/train/samples"
)

// Policy is a loaded checkpoint: the model and the files that travel with
// it; its optimiser state stays on disk until OpenOptimizer streams it.
type Policy struct {
	Model     *model.Model
	Dir       string // the checkpoint's directory
	Tokenizer map[string][]byte
	State     checkpoint.TrainerState
	// ServingOnly: the checkpoint holds the serving weights alone (no
	// optimiser state; for a model whose dtype is not float32, weights
	// rounded to it), not a state to continue training from.
	ServingOnly bool
}

// OpenOptimizer streams the checkpoint's optimiser state (verified as it
// is read).
func (p *Policy) OpenOptimizer(ctx context.Context) (io.ReadCloser, error) {
	return checkpoint.OpenOptimizer(ctx, p.Dir)
}

// LoadPolicy loads a committed checkpoint directory: the weights decoded
// into the model's own storage (trainer.LoadModel), the optimiser state
// left on disk.
func LoadPolicy(ctx context.Context, dir string) (*Policy, error) {
	m, ck, err := trainer.LoadModel(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &Policy{Model: m, Dir: dir, Tokenizer: ck.Tokenizer, State: ck.Trainer, ServingOnly: ck.ServingOnly}, nil
}

// SavePolicy commits a checkpoint. An already committed checkpoint at dir
// is left as it is (a rerun of a finished step).
func SavePolicy(ctx context.Context, dir string, m *model.Model, opt []byte, tok map[string][]byte, st checkpoint.TrainerState) error {
	return existsIsDone(trainer.SaveCheckpoint(ctx, dir, m, tok, opt, st))
}

// savePolicyStreaming is SavePolicy with the optimiser state streamed
// into the checkpoint by writeOpt.
func savePolicyStreaming(ctx context.Context, dir string, m *model.Model, writeOpt func(io.Writer) error, tok map[string][]byte, st checkpoint.TrainerState) error {
	return existsIsDone(trainer.SaveCheckpointWith(ctx, dir, m, tok, writeOpt, st))
}

func existsIsDone(err error) error {
	if errors.Is(err, checkpoint.ErrExists) {
		return nil
	}
	return err
}

// Learn runs the learner on step k: checkpoint k and step k's trajectories
// in, checkpoint k+1 and the step's metrics out. When checkpoint k+1 (or a
// later one) is already committed it does nothing and returns the metrics
// on record, so running it twice changes nothing. Checkpoint k+1 holds the
// full training state or the serving weights alone as checkpoint.save_every
// says; when checkpoint k holds serving weights alone, the state is
// rebuilt from the newest full state before it (see learnSession). ctx
// must carry the run directory's lease (Claim): without it Learn writes
// nothing and says so.
func Learn(ctx context.Context, cfg runconfig.Config, k int64) (records.Learn, error) {
	s := newLearnSession(cfg, nil)
	defer s.Close()
	return s.Learn(ctx, k)
}

// learnStep applies step k's update to st (the training state after k
// steps) under cfg and returns the step's metrics; it writes nothing. The
// reference policy, when the loss needs one, comes from ref.
func learnStep(ctx context.Context, cfg runconfig.Config, k int64, st *trainState, ref func(context.Context) (*model.Model, error)) (records.Learn, error) {
	start := time.Now()
	trajs, man, err := schemas.ReadStep[schemas.Trajectory](ctx, rundir.Step(cfg.Run.Dir, k))
	if err != nil {
		return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
	}
	if err := nothingToTrain(k, trajs, man.Meta); err != nil {
		return records.Learn{}, err
	}
	var carried int64 // rollout.carry: the most steps a group trained here was held back
	if cfg.Rollout.Carry {
		rst, err := records.ReadStepStats(man.Meta)
		if err != nil {
			return records.Learn{}, fmt.Errorf("learn step %d: the manifest's %w", k, err)
		}
		carried = rst.CarryStepsMax
	}
	if err := checkVersions(k, trajs, cfg.Staleness(), carried); err != nil {
		return records.Learn{}, err
	}
	l, err := st.learner(ctx, cfg, ref)
	if err != nil {
		return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
	}
	opt := l.Opt
	met := records.Learn{Kind: "learn", Step: k, PolicyVersion: k + 1, Trajectories: len(trajs), Rollout: man.Meta, LR: opt.LR()}
	met.Groups, met.GroupsNoSignal = groupSignal(trajs, cfg.Learner.Objective)
	if cfg.Learner.Objective == runconfig.ObjectiveRejectionSFT && l.DP != nil {
		return records.Learn{}, fmt.Errorf("learn step %d: learner.objective %s runs in one process; train it without --nproc (the data-parallel update is the RL objective's)", k, runconfig.ObjectiveRejectionSFT)
	}
	if cfg.Learner.Objective == runconfig.ObjectiveRejectionSFT {
		seqs, skipped, err := samples.Rejection(trajs, cfg.Rollout.TemplateTokens)
		if err != nil {
			return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
		}
		met.Skipped = skipped
		// A step without a correct trajectory leaves the policy as it is
		// (and the optimiser state with it).
		if len(seqs) > 0 {
			for _, s := range seqs {
				for _, skip := range s.Skip {
					if !skip {
						met.Tokens++
					}
				}
			}
			met.Loss, met.GradNorm, err = l.SFTStep(seqs, cfg.Learner.MicroBatchTokens)
			if err != nil {
				return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
			}
			met.LossMetrics = map[string]float64{"sft_sequences": float64(len(seqs))}
		}
		met.Seconds = time.Since(start).Seconds()
		return met, nil
	}
	batch, skipped, err := samples.Of(trajs, cfg.Rollout.TemplateTokens)
	if err != nil {
		return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
	}
	met.Skipped = skipped
	if err := noTrainableToken(k, batch, skipped, cfg.Rollout.TemplateTokens); err != nil {
		return records.Learn{}, err
	}
	if err := samples.WithBehavior(k, trajs, batch, cfg.Learner.Loss.RolloutCorrection); err != nil {
		return records.Learn{}, err
	}
	if met.Staleness, err = samples.WithVersions(k, trajs, batch); err != nil {
		return records.Learn{}, err
	}
	if len(batch) > 0 {
		rc := trainer.RLConfig{Loss: cfg.Learner.Loss, MicroBatchTokens: cfg.Learner.MicroBatchTokens,
			PPOEpochs: cfg.Learner.PPOEpochs, MiniBatches: cfg.Learner.MiniBatches}
		st, err := l.RLStepDP(ctx, rc, batch)
		met.Group = &records.Group{Ranks: l.DP.Comm.Size(), Shards: l.DP.Shards, Zero: l.DP.Zero}
		if err != nil {
			return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
		}
		met.Tokens, met.Loss, met.GradNorm, met.LossMetrics = st.Tokens, st.Loss, st.GradNorm, st.Metrics
		met.Mismatch = samples.MismatchOf(st)
		met.Staleness.MismatchByLag = samples.MismatchByLag(st)
	}
	met.Seconds = time.Since(start).Seconds()
	return met, nil
}

// nothingToTrain says why step k, whose committed trajectories are trajs
// and manifest meta meta, has nothing to learn from, or returns nil: no
// trajectory (every group dropped by dynamic sampling, or none rolled out),
// or every trajectory failed. The rollout refuses to commit such steps;
// this guards steps committed before it did, or by other writers.
func nothingToTrain(k int64, trajs []schemas.Trajectory, meta map[string]string) error {
	fix := fmt.Sprintf("fix the cause, then roll step %d out again (aipo rollout --config <run.yaml> --step %d --force) and rerun", k, k)
	failed := len(trajs) > 0
	for _, t := range trajs {
		if t.FinishReason != schemas.FinishError {
			failed = false
			break
		}
	}
	if len(trajs) > 0 && !failed {
		return nil
	}
	st, err := records.ReadStepStats(meta)
	if err != nil {
		return fmt.Errorf("learn step %d: nothing to train on, and the manifest's %w", k, err)
	}
	if len(trajs) == 0 {
		if st.GroupsDropped > 0 {
			draws := int64(1)
			if st.Refill != nil {
				draws = st.Refill.Draws
			}
			return fmt.Errorf("learn step %d: nothing to train on: all %d groups were dropped by advantage.dynamic_sampling in %d draw(s) (each group's rewards were equal, so no sample has an advantage); raise advantage.max_refill_rounds, rollout.group_size or data.batch_size, use harder or easier prompts, or turn dynamic_sampling off; checkpoint %d was not written", k, st.GroupsDropped, draws, k+1)
		}
		return fmt.Errorf("learn step %d: nothing to train on: the step holds no trajectory (prompts: %d); %s; checkpoint %d was not written", k, st.Prompts, fix, k+1)
	}
	first := st.FirstError
	if first == "" {
		first = "(not recorded)"
	}
	return fmt.Errorf("learn step %d: nothing to train on: every one of the %d trajectories failed; the first failure: %s; %s; checkpoint %d was not written",
		k, len(trajs), first, fix, k+1)
}

// noTrainableToken fails an RL step none of whose response tokens the loss
// trains on: no sample (all skipped: failed, or without a response), or
// samples whose tokens are all untrained (template tokens under
// rollout.template_tokens: untrained). Tokens with a zero advantage (a GRPO
// group whose rewards are all equal) are trainable: the loss sees them and
// its KL and entropy terms still apply, so such a step is a step.
func noTrainableToken(k int64, samples []trainer.RLSample, skipped int, templateTokens string) error {
	for _, s := range samples {
		for _, src := range s.Source {
			if src != loss.Untrained {
				return nil
			}
		}
	}
	if len(samples) == 0 {
		return fmt.Errorf("learn step %d: nothing to train on: all %d trajectories were skipped (failed, or without a prompt or response); see the step's rollout warnings for why, fix the cause and roll the step out again; checkpoint %d was not written", k, skipped, k+1)
	}
	return fmt.Errorf("learn step %d: nothing to train on: none of the response tokens of the %d samples is trained (all template tokens, rollout.template_tokens: %s); set rollout.template_tokens: %s or let the policy answer; checkpoint %d was not written",
		k, len(samples), templateTokens, runconfig.TemplateExternal, k+1)
}

// finishLearn records step k's learner metrics and commits checkpoint k+1
// from st (the state after step k): the full training state when full is
// set, else the serving weights alone. In a group of ranks (st.ranks) the
// other ranks write their weight shards meanwhile (see shards.go), and
// logf, when set, says who wrote them.
func finishLearn(ctx context.Context, cfg runconfig.Config, k int64, st *trainState, full bool, met records.Learn, logf func(string)) (records.Learn, error) {
	runDir, next := cfg.Run.Dir, rundir.Checkpoint(cfg.Run.Dir, k+1)
	if err := st.syncParams(); err != nil {
		return records.Learn{}, fmt.Errorf("learn step %d: %w", k, err)
	}
	var writeOpt func(io.Writer) error
	if full {
		writeOpt = st.writeOptimizer
	}
	opts := checkpoint.SaveOptions{MaxShardBytes: cfg.Checkpoint.MaxShardSize}
	var shards *rankgroup.ShardSave
	if st.ranks != nil && st.ranks.Group.Size() > 1 {
		shards = st.ranks.ShardSave(full)
		opts.Helpers = shards.Helpers()
	}
	err := writeJSON(ctx, rundir.MetricsRecord(runDir, rundir.LearnKind, k), met)
	if err == nil {
		ts := checkpoint.TrainerState{Step: k + 1, PolicyVersion: k + 1, RunID: cfg.Run.Name, Seed: int64(cfg.Run.Seed),
			Metrics: map[string]float64{"loss": met.Loss, "grad_norm": met.GradNorm}}
		m := st.pol.Model
		ck := checkpoint.Checkpoint{Config: m.Config(), Tensors: policyTensors(m), Tokenizer: st.pol.Tokenizer,
			WriteOptimizer: writeOpt, Trainer: ts, ServingOnly: !full, WriteTiedHead: writesTiedHead(cfg)}
		ck.Adapter, err = adapterFiles(m)
		if err == nil && full {
			err = st.optimizerParts(&ck)
		}
		if err == nil {
			err = checkpoint.SaveWith(ctx, next, ck, opts)
		}
		if shards != nil {
			// Also when the checkpoint was committed already: the other
			// ranks then stop waiting for a directory at once.
			shards.Abandon(ctx, err)
		}
		err = existsIsDone(err)
		if err != nil {
			err = fmt.Errorf("learn step %d: save checkpoint %d: %w", k, k+1, err)
		}
	}
	if shards != nil {
		shards.Abandon(ctx, err)
		if line := shards.Summary(k + 1); err == nil && line != "" && logf != nil {
			logf(line)
		}
	}
	if err != nil {
		return records.Learn{}, err
	}
	return met, nil
}

func writeJSON(ctx context.Context, p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return storage.WriteAtomic(ctx, p, append(b, '\n'))
}

// onBackend moves the learner's passes (policy and reference) to the
// backend called name (learner.backend), multiplying in precision, and
// returns the function that frees them and the device. The device is the
// backend's first, or for the rank whose LOCAL_RANK is local, its device
// local modulo the devices there are (torchrun's one rank a GPU; ranks
// beyond the GPUs share them, which a group that reduces on the host
// allows). With sharded the passes are opened for the stage-3 group that
// takes them next (trainer.Learner.OnSharded).
func onBackend(l *trainer.Learner, name, precision string, local int, sharded bool) (func(), int, error) {
	b, err := backend.Lookup(name)
	if err != nil {
		return nil, 0, err
	}
	var dv backend.Device
	ordinal := 0
	if o, ok := b.(backend.DeviceOpener); ok && local > 0 {
		devs, err := b.Devices()
		if err != nil {
			return nil, 0, err
		}
		if len(devs) == 0 {
			return nil, 0, fmt.Errorf("the %s backend sees no device", name)
		}
		ordinal = local % len(devs)
		dv, err = o.OpenDevice(ordinal)
		if err != nil {
			return nil, 0, err
		}
	} else if dv, err = b.Open(); err != nil {
		return nil, 0, err
	}
	on := l.On
	if sharded {
		on = l.OnSharded
	}
	free, err := on(dv, precision)
	if err != nil {
		dv.Close()
		return nil, 0, err
	}
	return func() {
		free()
		dv.Close()
	}, ordinal, nil
}
