// Package analytics is the Beam pipeline behind "aipo analyze": it reads the
// committed steps of a training run and reports the training dynamics of
// each step, the quantities of the AIPO paper's Fig. 5 (batch failed tasks,
// batch accuracy, batch interactions) and the ones that explain them.
//
// Input: <run>/step-NNNNNN/_MANIFEST.json and the trajectory shards it
// lists. A step without a manifest is not committed (its writer is running
// or was killed): it is skipped with a notice and never read. Shards are
// verified against the manifest's sizes and sha256 before they are parsed;
// a shard that fails (missing, damaged, not decodable) does not fail the
// analysis: its step is left out and listed as skipped, naming the shard
// and the reason (Report.Unreadable), and the other steps are reported. A
// run none of whose steps can be read is an error.
//
// Per step, over the step's trajectories (one per sample of a prompt):
//
//	accuracy              correct trajectories / trajectories
//	failed_tasks          prompts whose every sample is wrong / prompts
//	solved_all_tasks      prompts whose every sample is right / prompts
//	mean_reward           mean of the reward column
//	interactions_per_trajectory
//	                      interaction entries (every call the policy made,
//	                      including those refused at the interaction limit)
//	                      per trajectory, by agent and in total
//	external_token_share  response tokens written by a collaborator (source
//	                      not policy and not template) / all response tokens
//	template_token_share  template tokens / all response tokens
//	response_length       p50 and p95 of response tokens per trajectory
//	latency_ms            p50 and p95 over collaborator calls (interactions
//	                      whose status is not "limit": those made no call)
//	error_rate            calls with status other than ok / calls
//	noisy_doc_share       knowledge answers marked noisy / knowledge
//	                      interactions with status ok
//	length_finish_share   trajectories ended by the token budget
//
// Per step, from the learner's record of it (<run>/metrics/learn-NNNNNN.json,
// when the step has been learned from and its trajectories carry behaviour
// log-probs): the train-inference mismatch, i.e. the learner's
// log-probabilities of the policy's own tokens against the sampler's
// (policy tokens compared, mean and max |delta log p|, KL estimates k1 and
// k3), and the rollout correction's weight mean and bounded fractions when
// the step trained with learner.loss.rollout_correction. And the learner's
// figures of its update (LearnerMetrics, from <run>/metrics.jsonl, else the
// step's record): loss, gradient norm, learning rate, the KL estimates, the
// clip fractions and the external tokens' probability.
//
// Percentiles are exact, by the nearest-rank rule: the p-th percentile of n
// sorted values is the value at rank ceil(p/100 * n). The values of a step
// are gathered in its accumulator, so memory grows with the trajectories
// and calls of one step (a few thousand numbers for the paper's 256x8
// batch), not with the run.
//
// Output, under --out (default <run>/analysis, local or gs://):
// analysis.json (every metric of every step), analysis.md (a summary table,
// the learner's table and a table per step) and PNG plots: failed_tasks.png,
// accuracy.png, interactions.png and dynamics.png (the three side by side,
// as in Fig. 5), learner.png when the learner has run, and mismatch.png when
// a step has a mismatch measurement. Legends are drawn beside the plots
// (DrawClear), never over their lines.
package analytics
