// Package optim holds the learner's optimiser: AdamW with fp32 moments and
// decoupled weight decay, global gradient-norm clipping, and the constant
// and warmup-cosine learning-rate schedules, over a list of named float32
// parameter tensors. Its state serialises to a small binary format with a
// JSON header and a CRC for the checkpoint directory.
//
// The update is PyTorch's torch.optim.AdamW (single-tensor path) in the
// same float32 arithmetic; tests compare it with a PyTorch run recorded by
// scripts/optim_fixtures.py.
package optim
