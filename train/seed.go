package train

import (
	"context"
	"fmt"
	"io"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/runconfig"
)

// SeedCheckpoint commits the model at src (a Hugging Face model directory,
// or one of our checkpoints; see checkpoint.LoadWeights) as checkpoint 0 of
// the run at runDir, unless one is committed there already. config.json is
// kept as src has it, every key included, torch_dtype naming the dtype the
// weights of src are stored in: a bfloat16 (float16) model gives a
// checkpoint whose model.safetensors is bfloat16 (float16), with the
// float32 master weights beside it in master.safetensors; a float32 model
// one in float32 alone. tokenizer.json (and tokenizer_config.json and
// generation_config.json when src has them) travel along. The weights are
// checked against config.json (every tensor present, of its shape) before
// anything is written: a bad init leaves no checkpoint behind.
func SeedCheckpoint(ctx context.Context, src, runDir string) error {
	return seedCheckpoint(ctx, src, runDir, false)
}

// SeedRunCheckpoint is SeedCheckpoint into cfg's run directory, writing the
// LM head of a model with tied embeddings explicitly when the run's
// policy servers want it (vLLM; see writesTiedHead). ctx must carry the run's
// lease (Claim), as aipo train --init's does. A LoRA run (learner.lora)
// gets src as its frozen base and an adapter as checkpoint 0 (seedLoRA).
func SeedRunCheckpoint(ctx context.Context, src string, cfg runconfig.Config) error {
	if err := runlease.Require(ctx, cfg.Run.Dir); err != nil {
		return err
	}
	if cfg.LoRAOn() {
		return seedLoRA(ctx, src, cfg, writesTiedHead(cfg))
	}
	return seedCheckpoint(ctx, src, cfg.Run.Dir, writesTiedHead(cfg))
}

// writesTiedHead says whether the run's checkpoints carry lm_head.weight
// beside a tied embedding: when policy.sync pushes them to servers whose
// reload leaves a tied head on its old values otherwise (vLLM's in-place
// reload; runconfig.Sync.TiedHead, checkpoint.Checkpoint.WriteTiedHead).
func writesTiedHead(cfg runconfig.Config) bool {
	return cfg.Policy.Sync.TiedHead()
}

func seedCheckpoint(ctx context.Context, src, runDir string, tiedHead bool) error {
	dst := rundir.Checkpoint(runDir, 0)
	if ok, _ := checkpoint.Committed(ctx, dst); ok {
		return nil
	}
	cfg, tensors, err := checkpoint.LoadWeights(ctx, src)
	if err != nil {
		return fmt.Errorf("init %s: %w", src, err)
	}
	if _, err := trainer.ModelFromTensors(cfg, tensors); err != nil {
		return fmt.Errorf("init %s: %s does not fit %s: %w", src, checkpoint.WeightsPath(ctx, src), storage.Join(src, checkpoint.ConfigName), err)
	}
	files, err := checkpoint.ReadModelFiles(ctx, src)
	if err != nil {
		return fmt.Errorf("init %s: %w (the initial checkpoint must carry its tokenizer.json)", src, err)
	}
	return checkpoint.Save(ctx, dst, checkpoint.Checkpoint{Config: cfg, Tensors: tensors, Tokenizer: files,
		Trainer: checkpoint.TrainerState{RunID: storage.Base(runDir)}, WriteTiedHead: tiedHead})
}

// CopyWarmStart gives a run the shared warm start as its checkpoint 0,
// unless it has one already.
func CopyWarmStart(ctx context.Context, warm, dst string) error {
	if ok, err := checkpoint.Committed(ctx, dst); err == nil && ok {
		return nil
	}
	pol, err := LoadPolicy(ctx, warm)
	if err != nil {
		return fmt.Errorf("compare: warm start: %w", err)
	}
	copyOpt := func(w io.Writer) error {
		r, err := pol.OpenOptimizer(ctx)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	}
	if err := savePolicyStreaming(ctx, dst, pol.Model, copyOpt, pol.Tokenizer, pol.State); err != nil {
		return fmt.Errorf("compare: copy the warm start to %s: %w", dst, err)
	}
	return nil
}
