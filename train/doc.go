// Package train runs AIPO training: for each step K, the rollout pipeline
// samples the policy of checkpoint K with its collaborators and commits
// step K's trajectories; the learner reads them and commits checkpoint K+1;
// every few steps the policy is evaluated alone. Every phase is committed
// (manifests, checkpoint markers, atomically written metrics), so a run
// killed at any moment continues from where it was with the same command
// and reaches the same checkpoints as a run that was never interrupted.
//
// The loop owns the order of the phases and what is committed when; the
// parts it runs come in through Options: the rollout (the Beam pipeline of
// pipelines/rollout), the evaluations (train/evaluate), the policy servers
// of an external policy (train/policyservers) and TensorBoard's event
// files. train/wire runs the loop with the house's own parts.
//
// Run directory layout:
//
//	<run>/run.yaml                       the configuration the run started with
//	<run>/checkpoints/step-000000/       the initial policy (warm start or given)
//	<run>/checkpoints/step-000007/       the policy after 7 updates
//	<run>/step-000007/                   trajectories sampled from checkpoint 7
//	<run>/metrics/learn-000007.json      the learner's metrics of step 7
//	<run>/metrics/eval-000010.json       evaluation of checkpoint 10
//	<run>/metrics.jsonl                  every metrics record, rebuilt each step
package train
