package train

import (
	"context"
	"fmt"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/checkpoint"
)

// SeedCheckpoint commits the model at src (a Hugging Face model directory,
// or one of our checkpoints; see checkpoint.LoadWeights) as checkpoint 0 of
// the run at runDir, unless one is committed there already. config.json is
// kept as src has it, every key included (torch_dtype then names the
// float32 of the saved weights); tokenizer.json and tokenizer_config.json
// travel along, and generation_config.json when src has one.
func SeedCheckpoint(ctx context.Context, src, runDir string) error {
	dst := checkpoint.Dir(runDir, 0)
	if ok, _ := checkpoint.Committed(ctx, dst); ok {
		return nil
	}
	cfg, tensors, err := checkpoint.LoadWeights(ctx, src)
	if err != nil {
		return err
	}
	files, err := checkpoint.ReadModelFiles(ctx, src)
	if err != nil {
		return fmt.Errorf("%s: %w (the initial checkpoint must carry its tokenizer.json)", src, err)
	}
	return checkpoint.Save(ctx, dst, checkpoint.Checkpoint{Config: cfg, Tensors: tensors, Tokenizer: files,
		Trainer: checkpoint.TrainerState{RunID: storage.Base(runDir)}})
}
