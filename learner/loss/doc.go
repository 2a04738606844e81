// Package loss holds the AIPO policy-loss family as pure functions over
// per-token log-probabilities: the clipped surrogate of the base algorithm
// (GRPO, Dr.GRPO, DAPO, GSPO, ...: Bases) on the policy's own tokens, the
// amended importance coefficient with lower-bound clipping on collaborator
// tokens (AIPO, arXiv 2605.08401, Eq. 5-8) and its ablations, a k3 KL
// penalty to the reference policy, the aggregation of per-token terms into
// one scalar, and, optionally, truncated importance sampling on the
// behaviour ratio pi_old/pi_behav that corrects for the train-inference
// mismatch (correction.go; MeasureMismatch measures it).
//
// Compute returns the loss to minimise and its derivative with respect to
// each token's log-probability; the model chains that derivative through its
// log-softmax. As veRL's core_algos does, the loss is chosen by name from
// tables: the base algorithm (bases.go: the surrogate on Internal tokens,
// the preset's loss side, its checks and docs), the External treatment (a
// per-token term of its own, the token-level clipped ratio, or a mask) and
// the aggregation (the weight of each trajectory's tokens; both
// treatments.go); a new one is one entry there. Two implementations exist
// side by side: a literal token-by-token reference (reference.go) and the
// fused form Compute uses (compute.go); tests hold them to each other, to
// finite differences and to PyTorch autograd fixtures made by
// scripts/loss_fixtures.py.
package loss
