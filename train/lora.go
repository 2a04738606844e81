package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/peft"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// A LoRA run (learner.lora) keeps its frozen base once, as a committed
// serving checkpoint in <run>/lora-base, and writes each step's checkpoint
// as a PEFT adapter directory whose adapter_config.json names that base
// (base_model_name_or_path) and whose run files (trainer_state.json, the
// adapter's optimiser state, the tokenizer files) sit beside the adapter's.

// LoRABase is the directory of the LoRA run's base under runDir, absolute
// when local (the adapters name it, and are read from other directories).
func LoRABase(runDir string) string {
	dir := rundir.LoRABase(runDir)
	if !storage.IsRemote(dir) {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	return dir
}

// seedLoRA commits the base at src as the run's lora-base and a LoRA
// adapter on it as checkpoint 0, unless checkpoint 0 is committed already:
// the adapter of learner.lora.adapter (checked against the base: its
// recorded base's name, and its matrices' sizes), or a new one of
// learner.lora's settings drawn from the run's seed. Everything is checked
// before anything is written.
func seedLoRA(ctx context.Context, src string, cfg runconfig.Config, tiedHead bool) error {
	runDir := cfg.Run.Dir
	dst := rundir.Checkpoint(runDir, 0)
	if ok, _ := checkpoint.Committed(ctx, dst); ok {
		return nil
	}
	bcfg, tensors, err := checkpoint.LoadWeights(ctx, src)
	if err != nil {
		return fmt.Errorf("init %s: %w", src, err)
	}
	if _, err := trainer.ModelFromTensors(bcfg, tensors); err != nil {
		return fmt.Errorf("init %s: %s does not fit %s: %w", src, checkpoint.WeightsPath(ctx, src), storage.Join(src, checkpoint.ConfigName), err)
	}
	if isAdapter, err := checkpoint.IsAdapterCheckpoint(ctx, src); err == nil && isAdapter {
		return fmt.Errorf("init %s: a LoRA run's checkpoint, not a base model: pass the base model as --init and the adapter as --init-adapter", src)
	}
	files, err := checkpoint.ReadModelFiles(ctx, src)
	if err != nil {
		return fmt.Errorf("init %s: %w (the initial checkpoint must carry its tokenizer.json)", src, err)
	}
	dims, err := peft.DimsOf(bcfg)
	if err != nil {
		return fmt.Errorf("init %s: %w", src, err)
	}
	ad, err := initialAdapter(ctx, src, dims, cfg)
	if err != nil {
		return err
	}
	base := LoRABase(runDir)
	ad.Config.BaseModel = base
	af, err := ad.CheckpointFiles()
	if err != nil {
		return err
	}
	if ok, err := checkpoint.Committed(ctx, base); err != nil {
		return err
	} else if !ok {
		if err := checkpoint.Save(ctx, base, checkpoint.Checkpoint{Config: bcfg, Tensors: tensors, Tokenizer: files, ServingOnly: true,
			Trainer: checkpoint.TrainerState{RunID: storage.Base(runDir)}, WriteTiedHead: tiedHead}); err != nil {
			return fmt.Errorf("init %s: the LoRA run's base %s: %w", src, base, err)
		}
	}
	return checkpoint.Save(ctx, dst, checkpoint.Checkpoint{Config: bcfg, Adapter: af, Tokenizer: files,
		Trainer: checkpoint.TrainerState{RunID: storage.Base(runDir), Seed: int64(cfg.Run.Seed)}})
}

// initialAdapter is the adapter a LoRA run on the base at src (of sizes
// dims) starts from.
func initialAdapter(ctx context.Context, src string, dims peft.Dims, cfg runconfig.Config) (*peft.Adapter, error) {
	lc := cfg.Learner.LoRA
	if lc.Adapter == "" {
		pc, err := lc.AdapterConfig("")
		if err != nil {
			return nil, fmt.Errorf("learner.lora: %w", err)
		}
		ad, err := peft.New(pc, dims, rand.New(rand.NewPCG(cfg.Run.Seed, 0x6c6f7261)))
		if err != nil {
			return nil, fmt.Errorf("learner.lora: %w", err)
		}
		return ad, nil
	}
	ad, err := peft.Read(ctx, lc.Adapter)
	if err != nil {
		return nil, fmt.Errorf("learner.lora.adapter %s: %w", lc.Adapter, err)
	}
	if err := ad.SameBase(src); err != nil {
		return nil, fmt.Errorf("learner.lora.adapter %s on --init %s: %w", lc.Adapter, src, err)
	}
	if err := ad.CheckBase(dims); err != nil {
		return nil, fmt.Errorf("learner.lora.adapter %s on --init %s: %w", lc.Adapter, src, err)
	}
	ad.Config.Dropout = lc.Dropout
	return ad, nil
}

// adapterFiles are the policy's adapter as its checkpoint carries it, nil
// for a policy without one.
func adapterFiles(m *model.Model) (*checkpoint.Adapter, error) {
	if !m.HasAdapter() {
		return nil, nil
	}
	return m.Adapter().CheckpointFiles()
}

// policyTensors are the tensors a checkpoint of the policy m carries:
// its weights, or none for a LoRA policy, whose checkpoint carries the
// adapter alone (adapterFiles) and whose frozen base is not whole on a
// rank of a group at learner.zero 3 (sharded across the ranks).
func policyTensors(m *model.Model) []checkpoint.Tensor {
	if m.HasAdapter() {
		return nil
	}
	return trainer.Tensors(m)
}

// checkLoRAPolicy refuses a policy that does not match learner.lora: a
// whole model's checkpoint under learner.lora (the run was not started
// with it), or an adapter's without it.
func checkLoRAPolicy(cfg runconfig.Config, k int64, m *model.Model) error {
	switch {
	case cfg.LoRAOn() && !m.HasAdapter():
		return fmt.Errorf("learner.lora is set but checkpoint %d of %s is a whole model's, not a LoRA adapter's: a LoRA run starts with aipo train --init BASE into a new run directory (its checkpoint 0 is then an adapter on BASE)", k, cfg.Run.Dir)
	case !cfg.LoRAOn() && m.HasAdapter():
		return fmt.Errorf("checkpoint %d of %s is a LoRA adapter's but learner.lora is not set: keep the run's learner.lora section (or merge the adapter with aipo lora merge and start a new run from the merged model)", k, cfg.Run.Dir)
	}
	return nil
}
