// Package advantage turns the rewards of the G samples of one prompt into
// per-sample advantages, the quantity the policy-gradient loss weights each
// trajectory's tokens by, and holds DAPO's reward-side helpers.
//
// Methods ([Compute], [Config.Advantages]):
//
//   - grpo:   A_i = (r_i - mean(r)) / (std(r) + eps). std is the sample
//     standard deviation (divides by G-1), as torch.std computes it in the
//     usual PyTorch implementations; Config.PopulationStd divides by G
//     instead. eps defaults to 1e-6.
//   - drgrpo: A_i = r_i - mean(r) (Dr. GRPO drops the std normalisation).
//   - rloo:   A_i = r_i - mean_{j != i}(r_j) = G/(G-1) * (r_i - mean(r)).
//
// A group whose rewards are all equal (including a group of one) gets all
// zero advantages under every method: it carries no learning signal. (Some
// implementations return the raw reward for a group of one; here a lone
// sample has no baseline and contributes nothing.)
//
// DAPO's dynamic sampling drops such groups before the update and refills
// the batch from further prompts (Config.MaxRefillRounds; the rollout does
// the drawing): [AllEqual] says whether to drop one and [GroupFilter]
// counts kept and dropped groups. DAPO's overlong reward shaping is [OverlongPenalty], added to the
// reward before advantages are computed ([Config.Shape]).
//
// Arithmetic is done in float64 and returned as float32.
package advantage
