// Package rollout is the rollout pipeline of one training step: `aipo
// rollout --config run.yaml --step K`.
//
//	prompts (prompt files, or the demo task's questions for step K)
//	  -> Select the step's batch (run seed, step)   -> bad rows to the dead-letter file
//	  -> Batch prompts, so that a worker keeps many trajectories in flight
//	  -> Sample G trajectories per prompt (policy <-> collaborators, transforms/interact)
//	  -> Score (verifier by data_source, minus the interaction cost)
//	  -> Advantages per group (dynamic sampling drops and counts all-equal groups)
//	  -> Parquet shards in <run.dir>/step-K/shards/, then _MANIFEST.json with the
//	     policy version and the step's metrics in its meta
//
// A step with nothing to train on is refused before its manifest is
// written (transforms/trajectories.StepCheck): no prompt row (every row of the
// prompt files malformed, or none), every sample failed, or a failed share
// above rollout.max_failed_fraction. Run then returns the refusal alone
// (the counts, the first failure and the fix); the shards already written
// stay uncommitted and are removed by the step's next commit.
//
// It runs on prism unless Beam's --runner flag says otherwise. See package
// transforms/trajectories for the transforms and runconfig for the
// configuration.
//
// # Manifest meta
//
// Besides the statistics of transforms/records.StepStats (trajectories,
// failures by kind, interactions per agent and status, dropped groups,
// reward and accuracy), the manifest records config_hash, seed,
// group_size, max_interactions, opener_by, template_tokens,
// interaction_cost, answer_token_budget, data (the prompt files or
// "demo"), policy_endpoint (without credentials) and dead_letters (bad
// prompt rows; prompt files only), first_error (the first failed sample's
// text, when one failed) and step_check (passed).
package rollout
