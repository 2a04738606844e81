package runconfig

import (
	"math"
	"time"

	"github.com/aipo-rl/aipo/evalconfig"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/advantage"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
	"github.com/aipo-rl/aipo/transforms/prompts/promptsource"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
)

// Config is one run's configuration: one YAML file with the sections
// below. See the package documentation for every field and its default.
type Config struct {
	Run           Run              `yaml:"run"`
	Data          Data             `yaml:"data"`
	Policy        Policy           `yaml:"policy"`
	Rollout       Rollout          `yaml:"rollout"`
	Collaborators collab.Config    `yaml:"collaborators"`
	Reward        Reward           `yaml:"reward"`
	Advantage     advantage.Config `yaml:"advantage"`
	Learner       Learner          `yaml:"learner"`
	Eval          Eval             `yaml:"eval"`
	Checkpoint    Checkpoint       `yaml:"checkpoint"`

	// baseDir resolves relative input file names: the config file's
	// directory, when it came from a local file.
	baseDir string
}

// Run names the run and where it lives.
type Run struct {
	// Name identifies the run in trajectories and manifests; default: the
	// last element of Dir.
	Name string `yaml:"name"`
	// Dir is the run directory, local or gs://bucket/path (required). A
	// relative local path is relative to the working directory.
	Dir string `yaml:"dir"`
	// Seed drives every random choice of the run: prompt order, sampling
	// seeds, collaborator noise (default 0).
	Seed uint64 `yaml:"seed"`
	// Steps is the number of training steps (default 200, the paper's).
	Steps int64 `yaml:"steps"`
	// Async overlaps rollout and learning: step k is sampled by checkpoint
	// k-1 (step 0 by checkpoint 0), so that rollout k+1 runs while the
	// learner turns step k into checkpoint k+1, and two rollouts may be in
	// flight at once. The learner then sees trajectories one version behind
	// (Policy.MaxStaleness is at least 1). Default false: rollout k on
	// checkpoint k, then learn k, strictly in turn.
	Async bool `yaml:"async,omitempty"`
	// TensorBoard writes the per-step metrics as TensorBoard event files
	// in <dir>/tensorboard (default true; false, or aipo train
	// --no-tensorboard, turns it off). Each invocation follows its own
	// setting: changing it is not a change of the run.
	TensorBoard *bool `yaml:"tensorboard,omitempty"`
	// AllowNoSignal lets a run none of whose steps had a learning signal
	// (every group's rewards tied, so every advantage was 0) end with
	// success. By default (false) such a run fails when its last step is
	// trained, saying what to change: it trained on nothing. Set it for a
	// smoke run of the plumbing on an untrained model, which the steps'
	// warnings still name.
	AllowNoSignal bool `yaml:"allow_no_signal,omitempty"`
}

// WritesTensorBoard is TensorBoard with its default (true).
func (r Run) WritesTensorBoard() bool { return r.TensorBoard == nil || *r.TensorBoard }

// Data says where the training prompts come from: the sources, of one kind
// (prompt files, or the built-in demo task; see transforms/prompts), and
// how many a step takes.
type Data struct {
	// Sources are where the prompts come from (required): prompt files
	// (path, format, preset, fields, data_source), or one entry of kind
	// demo, the built-in demo task (task, split). See promptsource.Config.
	Sources promptsource.List `yaml:"sources,omitempty"`
	// BatchSize is the number of prompts per step; its default is the
	// sources' (256, the paper's, for files; 32 for the demo). A dataset
	// with fewer prompts gives all of them every step.
	BatchSize int `yaml:"batch_size"`
	// DeadLetterDir receives one JSONL file of bad prompt rows per step
	// (step-NNNNNN.jsonl); default <run.dir>/dead_letters.
	DeadLetterDir string `yaml:"dead_letter_dir"`
	// Shorthand is the earlier way of asking for the demo task, still
	// read (see DemoShorthand); Fill writes it out as a source and clears
	// it, so it is never written back.
	Shorthand DemoShorthand `yaml:",inline"`
}

// Policy says how to reach the policy and how it samples.
type Policy struct {
	// Endpoint is the policy's URI for policy.Open: grpc://host:port (aipo
	// serve), http://host:port/v1?model=name (aipo serve, vLLM, SGLang), or
	// inproc://name. `aipo train` samples each step from it; empty, or
	// inproc:// alone (the default), is an engine of its own in the
	// process, on the step's checkpoint. `aipo rollout` needs it here or
	// from --policy.
	Endpoint string `yaml:"endpoint"`
	// Params are the sampling parameters, at the section's top level:
	// temperature (default 1.0; 0 is greedy), top_p (nucleus sampling's
	// mass, default 1.0, off), top_k (the k likeliest tokens, default 0,
	// off) and stop (extra stop strings that end a response with finish
	// reason "stop"; default none). The rollout sets each call's token
	// budget and seed.
	sampling.Params `yaml:",inline"`
	// MaxResponseTokens bounds a response, collaborator tokens included
	// (default 16384, the paper's).
	MaxResponseTokens int `yaml:"max_response_tokens"`
	// DType is the precision of aipo train's own engine, as aipo serve's
	// --dtype: auto (the default: on the cpu backend bfloat16 when the
	// step's checkpoint stores bfloat16, the model is at least 512 wide and
	// the CPU has AMX or AVX512-BF16; on cuda bfloat16 weights and KV cache
	// when the checkpoint stores bfloat16; float32 otherwise), bfloat16 or
	// float32. The learner stays float32; the gap between the sampler's and the learner's
	// log-probabilities is what learner.rollout_correction and the
	// mismatch metrics of the learner record are for. A policy server's
	// precision is its own (aipo serve --dtype, vLLM --dtype).
	DType string `yaml:"dtype"`
	// Retries of a failed policy call, with the same seed (default 3).
	Retries int `yaml:"retries"`
	// BackoffInitial and BackoffMax shape the wait before a retry
	// (exponential, full jitter; defaults 200ms and 5s).
	BackoffInitial time.Duration `yaml:"backoff_initial"`
	BackoffMax     time.Duration `yaml:"backoff_max"`
	// Timeout bounds one policy call (default 10m), and the check that the
	// policy server answers before a step is rolled out.
	Timeout time.Duration `yaml:"timeout"`
	// MaxStaleness is how many policy versions the weights that sampled a
	// step may lag behind the checkpoint the learner updates: the learner
	// refuses a step with a trajectory sampled by a version outside
	// [k - MaxStaleness, k]. Unset: 0, or 1 when Run.Async.
	MaxStaleness *int64 `yaml:"max_staleness,omitempty"`
	// Sync pushes every new checkpoint to the policy servers of the run
	// before the next rollout starts (default: none).
	Sync Sync `yaml:"sync,omitempty"`
}

// Sync says how `aipo train` tells the policy servers of the run to load
// each new checkpoint. The servers read the checkpoint directory
// themselves (shared storage, or gs:// for aipo serve).
type Sync struct {
	// Kind is the servers' reload protocol, a kind registered in
	// transforms/policy/weightsync (docs/operators.md tables them):
	// "none" (default) tells nobody, and the servers must load the
	// checkpoints by themselves, as aipo serve --watch does; the others,
	// such as "aipo" (aipo serve's Reload RPC), "sglang" (SGLang's POST
	// /update_weights_from_disk) and "vllm" (vLLM's POST /collective_rpc
	// reload_weights), push every checkpoint.
	Kind string `yaml:"kind,omitempty"`
	// Endpoints are the control addresses of every replica serving the
	// run, updated together, of a scheme of the kind's (grpc://host:port
	// for aipo, http://host:port for sglang and vllm; default: the policy
	// endpoint's scheme, host and port when it is one of them). Query
	// parameters token_env, token_file and ca as in the policy endpoint.
	Endpoints []string `yaml:"endpoints,omitempty"`
	// Timeout bounds one push to one replica, the load of the weights and
	// the check of the answer included (default 10m).
	Timeout time.Duration `yaml:"timeout,omitempty"`
	// CheckpointDir is the run's checkpoints directory as the servers see
	// it (default <run.dir>/checkpoints, made absolute): checkpoint k is
	// CheckpointDir/step-NNNNNN.
	CheckpointDir string `yaml:"checkpoint_dir,omitempty"`
	// LoadFormat is sent to SGLang as load_format (default: the server's).
	LoadFormat string `yaml:"load_format,omitempty"`
}

// Staleness is Policy.MaxStaleness with its default: 1 for an
// asynchronous run, 0 otherwise.
func (c Config) Staleness() int64 {
	if c.Policy.MaxStaleness != nil {
		return *c.Policy.MaxStaleness
	}
	if c.Run.Async {
		return 1
	}
	return 0
}

// InProcessPolicy reports whether `aipo train` samples from an engine of
// its own (policy.endpoint empty or inproc:// alone).
func (c Config) InProcessPolicy() bool {
	return c.Policy.Endpoint == "" || c.Policy.Endpoint == InProcessEndpoint
}

// InProcessEndpoint is the policy.endpoint that names aipo train's own
// engine explicitly.
const InProcessEndpoint = "inproc://"

// DefaultSyncTimeout bounds one push of a checkpoint to one replica.
const DefaultSyncTimeout = 10 * time.Minute

// Rollout configures the interaction protocol and the rollout workers.
type Rollout struct {
	// GroupSize is G, the samples per prompt (default 8).
	GroupSize int `yaml:"group_size"`
	// MaxInteractions is the number of collaborator calls per trajectory
	// (default 3, the paper's); later tags get LimitNotice. 0 answers
	// every tag with the notice.
	MaxInteractions int `yaml:"max_interactions"`
	// Unanswered leaves every call unanswered: the policy goes on writing
	// alone, as at evaluation, and every token of the response is its own.
	// This is plain RLVR (the GRPO baseline) on a policy that knows the
	// call format; MaxInteractions is then unused (default false).
	Unanswered bool `yaml:"unanswered"`
	// OpenerBy is who writes the result's opening <result>: "system"
	// (default, the paper's) or "policy" (the policy writes it and stops
	// just after; see transforms/interact).
	OpenerBy string `yaml:"opener_by"`
	// TemplateTokens is how the learner treats template tokens (<result>
	// wrappers and notices): "untrained" (default) or "external" (trained
	// like collaborator tokens).
	TemplateTokens string `yaml:"template_tokens"`
	// AnswerTokenBudget truncates each collaborator answer (default 512).
	AnswerTokenBudget int `yaml:"answer_token_budget"`
	// InteractionCost is subtracted from the reward per interaction
	// (default 0).
	InteractionCost float64 `yaml:"interaction_cost"`
	// MaxInFlight bounds the trajectories a worker runs at once (default 64).
	MaxInFlight int `yaml:"max_in_flight"`
	// PromptsPerBatch is how many prompts one rollout element carries
	// (default 0: enough for 4 x MaxInFlight trajectories).
	PromptsPerBatch int `yaml:"prompts_per_batch"`
	// MaxFailedFraction bounds the share of a step's samples that may fail
	// (finish reason error: the policy unreachable, a prompt longer than
	// its context, ...): a step above it fails before it is committed, with
	// the counts and the first failure; one at or below it trains on the
	// rest, warned once. A step whose every sample failed always fails.
	// Unset: 0.5 (FailedFractionBound).
	MaxFailedFraction *float64 `yaml:"max_failed_fraction,omitempty"`
	// SystemPrompt is the system prompt describing the agents (inline);
	// SystemPromptFile names a file holding it (relative to the config
	// file). Neither: the built-in text. Both: an error.
	SystemPrompt     string `yaml:"system_prompt"`
	SystemPromptFile string `yaml:"system_prompt_file"`
	// PromptTemplate turns a problem into the prompt text (Go
	// text/template; fields .System, .Problem, .ID, .DataSource). It is
	// encoded with special tokens parsed. Default: ChatML with the system
	// prompt.
	PromptTemplate string `yaml:"prompt_template"`
	// ChatTemplate is where the model's own chat template comes from: a
	// tokenizer_config.json holding a Jinja "chat_template" (or the
	// directory holding one; relative to the config file, or gs://), or
	// "none" for PromptTemplate. Empty (the default): the run's initial
	// checkpoint, <run.dir>/checkpoints/step-000000/tokenizer_config.json,
	// when it holds a chat_template and PromptTemplate is not set;
	// otherwise PromptTemplate (or its ChatML default), said once. With a
	// chat template each prompt is rendered as Hugging Face's
	// apply_chat_template renders a system turn (the system prompt above)
	// and a user turn (the problem), with the generation prompt.
	ChatTemplate string `yaml:"chat_template,omitempty"`
	// EnableThinking, when set, is the chat template's enable_thinking
	// (Qwen3: false adds an empty think block); unset leaves it to the
	// template's default.
	EnableThinking *bool `yaml:"enable_thinking,omitempty"`
	// LimitNotice answers tags after MaxInteractions calls.
	LimitNotice string `yaml:"limit_notice"`
	// Guidance mixes off-policy guidance traces into each group, LUFFY's
	// way (arXiv 2504.14945): the last traces of group_size samples are a
	// reference solution of the prompt (source solution) or a teacher
	// model's answer (source teacher) instead of the policy's samples,
	// trained as off-policy tokens (learner.loss.external luffy for
	// LUFFY's shaping). Default off.
	Guidance guidance.Config `yaml:"guidance,omitempty"`
	// Partial continues the samples in flight across weight pushes: at a
	// push the policy server stops each generation running on the old
	// weights, the tokens sampled so far stay with their behaviour
	// log-probs and the version that sampled them, and the sample goes on
	// from its prompt plus those tokens, by token ids, on the new weights
	// (a collaborator call in flight finishes first; its tokens stay
	// external). It needs run.async (pushes happen while a step is
	// sampled), and the in-process policy (one engine for the whole run,
	// advanced to each checkpoint), aipo serve replicas started with
	// --interrupt-on-reload behind policy.sync kind aipo, or one vLLM
	// behind policy.sync kind vllm (each push pauses it with mode abort,
	// and the rollouts' endpoint gets partial=true). Default false:
	// a generation finishes on the weights it started with.
	Partial bool `yaml:"partial,omitempty"`
	// PartialTokens, when positive, makes partial rollouts deterministic
	// (in-process policy only): the first PartialTokens policy tokens of
	// each sample of step k are sampled by checkpoint k-1 and the rest by
	// checkpoint k, which the sample waits for; no push interrupts
	// anything. Where each sample switches weights is then fixed by the
	// configuration rather than by when a push lands, so a run killed in
	// the middle of a partial sample resumes to the same bits as an
	// uninterrupted one. Default 0: the push interrupts what is running.
	PartialTokens int `yaml:"partial_tokens,omitempty"`
	// Carry lets a step's batch close before all its groups finish: when
	// the push that starts step k+1's rollout interrupts samples of step
	// k, those samples stop there instead of going on inside step k; each
	// group with an unfinished (or unstarted) sample is persisted whole,
	// with the state of its unfinished samples, under step k's directory
	// as part of step k's commit (carry/), and step k's batch is the
	// groups that finished. Step k+1's rollout reads them and continues
	// each unfinished sample from its prompt plus its tokens, by token
	// ids, on the new weights; the group is scored, given its advantages
	// and trained in step k+1 once whole (it may be carried again). It
	// needs rollout.partial (and so run.async), without partial_tokens or
	// advantage.dynamic_sampling. Default false.
	Carry bool `yaml:"carry,omitempty"`
	// CarryMinFinished is the share of a step's groups (data.batch_size)
	// that must have finished for its batch to close at the push; below
	// it the interrupted samples go on inside the step as rollout.partial
	// alone would (default 0.5 when unset; 0 < x <= 1).
	CarryMinFinished *float64 `yaml:"carry_min_finished,omitempty"`
	// CarryMaxSteps bounds how many steps a group may be carried: a group
	// carried into a step that many times is finished inside that step,
	// its samples going on across the next push as under rollout.partial
	// alone (the step waits for it), so that its oldest tokens lag at
	// most policy.max_staleness + CarryMaxSteps behind the checkpoint
	// that trains them (default 2 when unset; 0: bounded by the run's
	// steps alone, since the last step carries nothing).
	CarryMaxSteps *int64 `yaml:"carry_max_steps,omitempty"`
}

// DefaultCarryMaxSteps is rollout.carry_max_steps when unset.
const DefaultCarryMaxSteps = 2

// CarryBound is CarryMaxSteps with its default (0: no bound).
func (r Rollout) CarryBound() int64 {
	if r.CarryMaxSteps != nil {
		return *r.CarryMaxSteps
	}
	return DefaultCarryMaxSteps
}

// DefaultCarryMinFinished is rollout.carry_min_finished when unset.
const DefaultCarryMinFinished = 0.5

// CarryMinGroups is how many of batch groups must have finished for a
// step's batch to close at a push under rollout.carry (at least 1).
func (r Rollout) CarryMinGroups(batch int) int {
	f := DefaultCarryMinFinished
	if r.CarryMinFinished != nil {
		f = *r.CarryMinFinished
	}
	return max(1, int(math.Ceil(f*float64(batch))))
}

// FailedFractionBound is MaxFailedFraction, or its default (0.5) when
// unset.
func (r Rollout) FailedFractionBound() float64 {
	if r.MaxFailedFraction == nil {
		return DefaultMaxFailedFraction
	}
	return *r.MaxFailedFraction
}

// Reward configures scoring.
type Reward struct {
	// DataSource, when set, picks the verifier for every prompt instead of
	// each prompt's own data_source (see transforms/verify). A task's
	// prompts have the data_source its verifier is registered under (the
	// demo's: demo).
	DataSource string `yaml:"data_source"`
	// Strict (default true) scores training rewards in each verifier's
	// strict form (verify.ForTraining): only the final answer the format
	// marks counts (\boxed{} for math and integers, a boxed letter for
	// multiple choice), never a fall-back to the last number of the text.
	// Evaluation (aipo eval) keeps the lenient extraction benchmarks are
	// usually scored with.
	Strict *bool `yaml:"strict"`
	// ScoreTruncated scores a response that the length budget cut off
	// (finish_reason length) like any other; by default (false) it scores
	// 0, whatever it holds.
	ScoreTruncated bool `yaml:"score_truncated"`
}

// IsStrict is Strict with its default.
func (r Reward) IsStrict() bool { return r.Strict == nil || *r.Strict }

// Learner configures the learner.
type Learner struct {
	// Loss selects the objective (base algorithm, external-token
	// treatment, clips, omega, KL, aggregation); default loss.DefaultConfig().
	Loss loss.Config `yaml:"loss"`
	// Optim is AdamW's setting; default optim.DefaultConfig().
	Optim optim.Config `yaml:"optim"`
	// MicroBatchTokens bounds the tokens of one forward/backward pass
	// (default 16384).
	MicroBatchTokens int `yaml:"micro_batch_tokens"`
	// PPOEpochs is the passes over a step's trajectories (default 1).
	PPOEpochs int `yaml:"ppo_epochs"`
	// MiniBatches is the optimiser updates per epoch (default 1).
	MiniBatches int `yaml:"mini_batches"`
	// Backend is the compute backend, a name registered in learner/backend:
	// "cpu" (default) or "cuda" (in a binary that links learner/cuda, as
	// cmd/aipo does).
	Backend string `yaml:"backend"`
	// Precision is the matrix multiplies' operand type, one the backend
	// multiplies in: "fp32" (default) or "bf16" (cpu and cuda: bfloat16
	// operands, float32 accumulation, parameters, gradients and the
	// optimiser float32).
	Precision string `yaml:"precision"`
	// Objective is what the learner optimises: "rl" (default), the loss
	// above on every trajectory with its advantage, or "rejection-sft",
	// Expert Iteration (Havrilla et al. 2024): supervised fine-tuning on
	// the step's correct trajectories only, each distinct response once
	// per prompt; the loss and advantage settings are then unused.
	Objective string `yaml:"objective"`
	// ActivationCheckpointing keeps each decoder layer's input alone in
	// the forward pass and recomputes the layer before its backward pass,
	// so that a micro-batch holds one layer's activations instead of every
	// layer's, for about one more forward pass of compute; the gradients
	// are the same. "auto" (default) turns it on when a micro-batch's
	// activations without it would exceed 1 GiB on the backend
	// (trainer.CheckpointingThreshold), "on" and "off" as they say;
	// "offload" is on with each kept input in host memory instead of the
	// GPU's (learner.backend: cuda): the GPU holds two of them instead of
	// one a layer, each moves to the host in the forward pass and back in
	// the backward pass, and the gradients are the same bits.
	ActivationCheckpointing string `yaml:"activation_checkpointing"`
	// Zero is the ZeRO stage of a group of learner processes (aipo train
	// --nproc, or a launcher's ranks): 1 (default) shards the AdamW moments,
	// 2 also the gradients: on the CPU each layer's gradient goes to its
	// owners as the backward pass ends it and no rank holds a whole one
	// (on GPUs, whose gradients come whole to the host, the last shard's
	// are exchanged run by run after the pass). 3 also shards the
	// weights (on GPUs over NCCL, the state on the devices): each rank holds 1/N of every layer's float32 weights,
	// gradient and moments; the ranks gather each layer before a pass
	// reads it and reduce its gradient as the backward pass ends it (the
	// same bits at 1, 2, 4 and 8 ranks; stage 1's when each virtual
	// shard packs into one micro-batch). With learner.lora: 1, or 3
	// to shard the frozen base as well, gathered a
	// layer at a time for every pass, the adapter reduced and its
	// moments sharded as at stage 1 (docs/lora.md); 2 is refused (it
	// would hold nothing less than stage 1). One process ignores it.
	Zero int `yaml:"zero"`
	// KeepGatheredMiB is, at ZeRO stage 3 on the cpu backend, the most
	// MiB of gathered float32 weights a rank keeps from one pass to the
	// next until the optimiser's step changes them (as DeepSpeed's
	// stage3_max_live_parameters and FSDP's reshard_after_forward=False
	// keep gathered parameters): the units that fit, in the model's
	// order (the embedding, the layers, the head), are gathered once a
	// mini-batch instead of once a scoring pass and twice a training
	// pass. The bits are the same; aipo plan counts the kept units.
	// 0 (default) keeps none: the least memory.
	KeepGatheredMiB int64 `yaml:"keep_gathered_mib"`
	// Deterministic makes a group of learner processes split each
	// mini-batch into the same virtual shards (8, or the next power of two
	// above the group) at every size, so that 1, 2, 4 and 8 ranks end with
	// the same bits (default true). false gives each rank one shard, its
	// share packed whole: faster, with bits that depend on the group's size
	// (within float32 rounding of one process's). One process (no
	// --nproc) ignores it: it is the one rank of its own group, of one
	// shard summed in place, which holds no gradient buffer beside the
	// model's (8 shards would hold three); --nproc 1 is the group of one
	// with the groups' shards, the bits of every N.
	Deterministic bool `yaml:"deterministic"`
	// LoRA, when set, trains a LoRA adapter on the frozen policy instead
	// of every weight (see LoRA).
	LoRA *LoRA `yaml:"lora,omitempty"`
}

// KeepGathered is KeepGatheredMiB in bytes (trainer.DPConfig.KeepGathered).
func (l Learner) KeepGathered() int64 { return l.KeepGatheredMiB << 20 }

// DPShards is the virtual shards a group of ranks splits each mini-batch
// into (trainer.DPConfig.Shards): trainer.GroupShards' power of two with
// Deterministic, else one a rank.
func (l Learner) DPShards(ranks int) int {
	if l.Deterministic {
		return trainer.GroupShards(ranks)
	}
	return ranks
}

// Eval configures the evaluation without collaborators.
type Eval struct {
	// Every is the steps between evaluations (default 10; 0 turns it off).
	Every int64 `yaml:"every"`
	// Samples is k of Avg@k and Pass@k (default 4).
	Samples int `yaml:"samples"`
	// Splits are the splits of the task the run draws from that the
	// policy is evaluated alone on, for a task that names a benchmark for
	// each (the demo's; default: its kind's, seen and unseen). They go
	// through the eval pipeline like Benchmarks, with Samples samples at
	// Temperature, MaxResponseTokens, no stop strings and one greedy
	// response per problem; their scores (greedy and Avg@k accuracy,
	// Pass@k, the greedy responses' call rate) are the run's eval records.
	Splits []string `yaml:"splits,omitempty"`
	// Benchmarks are the held-out benchmarks `aipo train` evaluates every
	// Every steps with the eval pipeline (pipelines/eval: a preset, or a
	// file with its mapping, verifier and template; default none).
	// Their sampling is EvalSampling: the policy's sampling parameters
	// with Samples, Temperature and MaxResponseTokens of this section,
	// unless a benchmark sets its own samples or max_tokens.
	Benchmarks []evalconfig.Benchmark `yaml:"benchmarks,omitempty"`
	// Temperature of evaluation sampling, in place of the policy's
	// (default 1.0, the paper's; 0 is greedy).
	Temperature float32 `yaml:"temperature"`
	// MaxResponseTokens bounds an evaluation response (default: the
	// policy's).
	MaxResponseTokens int `yaml:"max_response_tokens"`
}

// EvalSampling is the sampling of the benchmark evaluations (Eval.Benchmarks):
// the policy's sampling parameters (top_p, top_k, stop) at eval.temperature,
// with eval.samples samples and eval.max_response_tokens as the response
// budget; the seed is the caller's.
func (c Config) EvalSampling() evalconfig.Sampling {
	p := c.Policy.Params
	p.Temperature, p.MaxTokens = c.Eval.Temperature, c.Eval.MaxResponseTokens
	return evalconfig.Sampling{Samples: c.Eval.Samples, Params: p}
}

// Checkpoint is what the learner writes after each step and what the run
// keeps. Checkpoint k (the policy after k steps) is always written: the
// serving weights in the model's dtype (a complete Hugging Face directory,
// what rollouts and policy servers load). Every SaveEvery steps, and at
// the run's last step, it also holds the full training state (float32
// master weights and the optimiser's moments), from which the run resumes;
// a run stopped after a serving checkpoint resumes from the newest full
// state and replays the learner steps since then from their committed
// trajectories, checking each replayed step against the checkpoint it
// wrote. After each step the run removes the checkpoints it keeps no
// longer (see the train package's Retained).
type Checkpoint struct {
	// SaveEvery is the steps between full training states (default 10;
	// 1 makes every checkpoint a full one, as earlier builds wrote).
	SaveEvery int64 `yaml:"save_every"`
	// KeepLast is how many of the newest checkpoints are kept (default 3;
	// 0 keeps every checkpoint, removing none). Checkpoint 0 (the initial
	// policy), the newest full state and a checkpoint that still samples
	// a step not yet committed (step k, or step k+1 with run.async) are
	// kept whatever it says.
	KeepLast int `yaml:"keep_last"`
	// KeepEvery, when positive, keeps for good the checkpoints of steps
	// that are multiples of it (default 0: none beyond KeepLast). A kept
	// checkpoint stays as it was written: serving weights, or full.
	KeepEvery int64 `yaml:"keep_every"`
	// MaxShardSize is the largest weights file a checkpoint holds, in
	// bytes (default 5000000000, Hugging Face's 5 GB; 0 means the
	// default): weights above it are
	// written as model-0000i-of-0000n.safetensors shards and
	// model.safetensors.index.json. The split depends on the tensors and
	// this size alone; under aipo train --nproc N rank r writes the shards
	// i with i mod N == r, in parallel.
	MaxShardSize int64 `yaml:"max_shard_size"`
}

// FullAt reports whether checkpoint step of a run of steps steps holds the
// full training state: every SaveEvery steps, at step 0 (the initial
// policy) and at the last step.
func (c Checkpoint) FullAt(step, steps int64) bool {
	return step == 0 || step >= steps || c.SaveEvery <= 1 || step%c.SaveEvery == 0
}

// ChatTemplateNone is the Rollout.ChatTemplate that turns the model's chat
// template off (prompts are rendered with Rollout.PromptTemplate).
const ChatTemplateNone = "none"

// Template token treatments (Rollout.TemplateTokens).
const (
	TemplateUntrained = "untrained"
	TemplateExternal  = "external"
)

// Objectives (Learner.Objective).
const (
	ObjectiveRL           = "rl"
	ObjectiveRejectionSFT = "rejection-sft"
)

// BackendCPU is the default Learner.Backend; the others are the names
// registered in learner/backend (backend.Names).
const BackendCPU = backend.CPUName

// Precisions (Learner.Precision).
const (
	PrecisionFP32 = backend.FP32
	PrecisionBF16 = backend.BF16
)

// Defaults not taken from other packages.
const (
	DefaultSteps             = 200
	DefaultGroupSize         = 8
	DefaultMaxInFlight       = 64
	DefaultMaxFailedFraction = 0.5
	DefaultMicroBatchTokens  = 16384
	DefaultEvalEvery         = 10
	DefaultEvalSamples       = 4
	DefaultSaveEvery         = 10
	DefaultKeepLast          = 3
	DefaultMaxShardSize      = checkpoint.DefaultMaxShardBytes
)

// TimeoutOrDefault is Timeout, or DefaultSyncTimeout when unset.
func (s Sync) TimeoutOrDefault() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultSyncTimeout
}

// Pushes reports whether checkpoints are pushed to policy servers (by
// Kind's registration; a kind nobody registered, which Validate refuses,
// counts as pushing).
func (s Sync) Pushes() bool {
	k, err := weightsync.Lookup(s.Kind)
	return err != nil || k.Pushes()
}

// TiedHead reports whether the kind's servers want lm_head.weight written
// beside a tied embedding: their reload leaves a tied head on its old values
// otherwise (weightsync.Kind.TiedHead; vLLM's in-place reload). A kind
// nobody registered wants none.
func (s Sync) TiedHead() bool {
	k, err := weightsync.Lookup(s.Kind)
	return err == nil && k.TiedHead
}
