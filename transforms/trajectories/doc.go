// Package trajectories holds the Beam transforms that make a step's
// trajectories (package pipelines/rollout assembles them into the rollout
// step's pipeline): choose the step's prompts, run G trajectories per prompt
// through the interaction protocol (package interact) with many in flight
// per worker, score them, compute group advantages and the step's metrics.
//
//	Select     PCollection<schemas.Prompt> -> PCollection<KV<int, schemas.Prompt>>   (slot -> prompt)
//	Batch      PCollection<KV<int, schemas.Prompt>> -> PCollection<KV<int, []schemas.Prompt>> (grouped)
//	Sample     batches -> PCollection<Group>       (G trajectories per prompt)
//	Score      PCollection<Group> -> PCollection<Group> (rewards)
//	Advantages PCollection<Group> -> PCollection<schemas.Trajectory>, PCollection<Stats>
//	StepMeta   PCollection<Stats> -> PCollection<parquetio.StepMeta>
//
// A step's prompts come from the run's sources (sources.go registers, with
// prompts.RegisterDraw, how a step draws from each kind of
// promptsource.List): Select chooses them from prompt files, Generated
// draws them from a task that generates its prompts (RegisterGenerator).
//
// Under dynamic sampling (refill.go) Decide replaces Advantages, Refill
// (its generated form for a task) draws further prompts after each draw,
// Trim keeps the batch and DecisionMeta replaces StepMeta:
//
//	Decide       PCollection<Group> -> PCollection<schemas.Trajectory>, PCollection<Decision>
//	Refill       PCollection<schemas.Prompt>, PCollection<Decision> -> PCollection<KV<int, schemas.Prompt>>
//	Trim         PCollection<schemas.Trajectory>, PCollection<Decision> -> PCollection<schemas.Trajectory>
//	DecisionMeta PCollection<Decision> -> PCollection<parquetio.StepMeta>
//
// # Workers
//
// The policy client (policy.Open of Spec.PolicyEndpoint) and the
// collaborators (collab.NewSet of Spec.Collaborators) are opened in the
// Setup of the sampling DoFn and closed in its Teardown. They are shared,
// reference-counted, by every instance of the DoFn in one worker process
// with the same Spec, as is the bound on trajectories in flight
// (Spec.MaxInFlight): a runner that runs several bundles at once on one
// worker does not multiply the bound, nor load the in-process engine twice.
// One element of the sampling DoFn is a batch of prompts; it starts the G
// trajectories of every prompt at once, each waiting for a slot of the
// bound, and emits each prompt's Group when its G trajectories are done.
//
// # Rewards
//
// A trajectory's reward is its verifier's score minus Spec.InteractionCost
// per interaction, then DAPO's overlong shaping when configured. The
// verifier judges what the policy wrote: the tokens collaborators and the
// system inserted are removed before verification, so the policy is never
// rewarded for a final answer an agent wrote. The verifier is chosen by
// the prompt's data_source (or Spec.RewardDataSource); a task registers
// the verifier of its own data_source. A trajectory that ended with finish reason
// "error" has reward 0.
//
// # Advantages
//
// Per prompt, over the trajectories that did not fail, with the configured
// method (GRPO, Dr.GRPO, RLOO); a failed trajectory gets advantage 0, so an
// infrastructure failure neither rewards nor punishes the policy. With
// dynamic sampling, groups whose (non-failed) rewards are all equal are
// dropped and counted, and further prompts are drawn and sampled until the
// step holds the batch size of kept groups (see refill.go). Every prompt
// yields exactly G trajectories otherwise, failed calls included.
//
// # Guidance traces
//
// With Spec.Guidance (LUFFY), the last traces of a prompt's G samples are
// a reference solution or a teacher's answer in the policy's tokens,
// marked schemas.SourceGuide, scored and normalised with the group (see
// guide.go).
//
// # Reproducibility
//
// Prompts of a step are chosen from the run seed and the step; sampling
// and collaborator seeds from the run seed, step, prompt id, sample index
// and turn or call (package interact). A re-run of a step gives the same
// rows.
package trajectories
