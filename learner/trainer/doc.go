// Package trainer turns trajectories into parameter updates: it packs
// sequences into micro-batches by a token budget, recomputes the old and
// reference log-probabilities, applies the AIPO loss (learner/loss) through
// the model's backward pass and steps the optimiser (learner/optim). It also
// runs supervised fine-tuning for warm starts, and converts between models
// and checkpoints.
//
// Shapes: a trajectory is prompt ids P followed by response ids R; the model
// sees P++R and is scored on the |R| positions that predict a response token.
// The per-token loss inputs are therefore laid out over response tokens only,
// in trajectory order.
package trainer
