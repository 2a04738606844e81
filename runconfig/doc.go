// Package runconfig is the configuration of a run: one YAML file read by
// `aipo train`, `aipo rollout`, `aipo learn` and `aipo eval`.
//
// Load reads a file (local or gs://), decodes it onto Default() so that
// every field left out keeps its default, rejects unknown fields, resolves
// relative input files (prompt files, the system prompt file, the
// collaborators' template and key files) against the file's directory,
// fills the defaults that depend on other fields (Fill) and validates the
// result (Validate names the field at fault). Examples with comments live in
// configs/ at the repository root.
//
// The commands' --set KEY=VALUE overrides any field below without editing
// the file (Load and Parse take them; the syntax is internal/yamlset's):
// KEY is the field's dotted path, a list entry by its index
// (data.sources.0.path for data.sources[].path), and VALUE is YAML as
// written after "KEY: " in the file. Each is applied to the file's YAML
// before decoding, so it is decoded and validated as the file's field; a
// mapping or list value replaces the file's whole.
//
// # Reference
//
// Every field, with its default. ROLE stands for verify, knowledge or
// reason; [] marks a list.
//
//	run.name                    run identifier in rows and manifests (default: last element of run.dir)
//	run.dir                     run directory, local or gs://bucket/path; required; relative to the working directory
//	run.seed                    seed of every random choice: prompt order, sampling, collaborator noise (0)
//	run.steps                   training steps (200)
//	run.async                   overlap rollout and learning: step k sampled by checkpoint k-1, rollout k+1 during learn k (false)
//	run.tensorboard             write the per-step metrics as TensorBoard event files in <run.dir>/tensorboard (true)
//	run.allow_no_signal         let a run none of whose steps had a learning signal (every group's rewards tied) end with success; a smoke run of the plumbing (false: it fails, saying what to change)
//
//	data.sources[]              where the prompts come from, entries of one kind; required (see transforms/prompts)
//	data.sources[].kind         file (prompt files; the default) or a task's kind: demo (the built-in demo task: one entry, task and split),
//	                            countdown (generated Countdown puzzles: one entry, task and split)
//	data.sources[].path         local path (relative to the config file) or gs:// object
//	data.sources[].format       jsonl, json, parquet; detected when empty
//	data.sources[].preset       a built-in mapping: aime24, aime25, amc23, math500, gsm8k, gsm8k_train, deepscaler_math,
//	                            aime_1983_2023, or verl (veRL's layout read as is; aipo data convert writes it)
//	data.sources[].fields       field mapping (default: problem|question|prompt|text, answer|final_answer, solution, id)
//	data.sources[].fields.problem        candidate fields of the problem text ("a|b" or a list)
//	data.sources[].fields.answer         candidate fields of the reference answer
//	data.sources[].fields.solution       candidate fields of a worked solution
//	data.sources[].fields.id             candidate fields of the row id (the row index otherwise)
//	data.sources[].fields.answer_marker  take the answer after the last marker ("#### " for GSM8K)
//	data.sources[].fields.drop           fields not kept in the prompt's extra column
//	data.sources[].fields.keep           fields kept in the extra column although a mapped field came from inside them
//	data.sources[].fields.messages       the problem field is a chat message list: its last user message (veRL's prompt)
//	data.sources[].fields.data_source    candidate fields of a per-row data_source, matched to a verifier (veRL's)
//	data.sources[].data_source  data_source of every row; picks its verifier (or from the preset; verl: each row's own)
//	data.sources[].task         a task's settings, which its package documents; when given, give all of them.
//	                            kind demo: seed (7), num_entities (40), seen_frac (0.5), min_value (100),
//	                            max_value (999), max_n (9); kind countdown: see tasks/countdown's Config
//	data.sources[].split        a task's split: kind demo: entities training questions come from: all, seen, unseen (all);
//	                            kind countdown: train (the held-out test split is for evaluation)
//	data.batch_size             prompts per step (256; 32 for the demo); a smaller dataset gives all its prompts
//	data.dead_letter_dir        where bad prompt rows go, one step-NNNNNN.jsonl per step (<run.dir>/dead_letters)
//	data.demo                   shorthand, still read: true is data.sources: [{kind: demo}] (false)
//	data.demo_task              shorthand: that entry's task (data.sources[].task, kind demo)
//	data.demo_split             shorthand: that entry's split (data.sources[].split)
//
//	policy.endpoint             policy URI for policy.Open (grpc://host:port, http://host:port/v1?model=m, inproc://name); aipo train
//	                            samples every step from it; empty or inproc:// alone: aipo train's own engine on the step's
//	                            checkpoint (the default); aipo rollout needs it, or --policy
//	policy.temperature          sampling temperature, 0 is greedy (1.0)
//	policy.top_p                nucleus mass, 1 is off (1.0)
//	policy.top_k                top-k, 0 is off (0)
//	policy.max_response_tokens  response budget, collaborator tokens included (16384)
//	policy.stop[]               extra stop strings ending a response with finish reason stop (none)
//	policy.dtype                aipo train's own engine's precision: auto, bfloat16 or float32 (auto: bfloat16 for a bfloat16 checkpoint, on the cpu backend >= 512 wide on AMX/AVX512-BF16)
//	policy.retries              retries of a failed policy call, same seed (3)
//	policy.backoff_initial      first retry wait ceiling, exponential with full jitter (200ms)
//	policy.backoff_max          largest retry wait (5s)
//	policy.timeout              bound on one policy call, and on aipo train's check that the server answers, 0 none (10m)
//	policy.max_staleness        versions a step's sampling weights may lag behind the learner's checkpoint (0; 1 with run.async)
//	policy.sync                 how aipo train pushes each new checkpoint to the policy servers (docs/operators.md)
//	policy.sync.kind            none, aipo (Reload RPC), sglang (/update_weights_from_disk), vllm (/collective_rpc) (none)
//	policy.sync.endpoints[]     every replica's control address: grpc://host:port (aipo), http://host:port (sglang, vllm)
//	                            (the policy endpoint's, when it is of that scheme)
//	policy.sync.timeout         bound on one push to one replica, load and check included (10m)
//	policy.sync.checkpoint_dir  the run's checkpoints directory as the servers see it (<run.dir>/checkpoints, absolute)
//	policy.sync.load_format     SGLang's load_format (the server's)
//
//	rollout.group_size          G, samples per prompt, at least 2 (8)
//	rollout.max_interactions    collaborator calls per trajectory; later tags get limit_notice (3)
//	rollout.unanswered          no collaborators: calls get no answer, the policy writes on alone (plain RLVR) (false)
//	rollout.opener_by           who writes <result>: system (paper) or policy (stops right after writing it) (system)
//	rollout.template_tokens     learner's treatment of template tokens: untrained or external (untrained)
//	rollout.answer_token_budget tokens kept of each answer (512)
//	rollout.interaction_cost    reward subtracted per interaction (0)
//	rollout.max_in_flight       trajectories a worker runs at once (64)
//	rollout.partial             continue samples in flight across weight pushes on the new weights, by token ids (false; needs run.async, and the in-process policy, aipo serve --interrupt-on-reload behind policy.sync kind aipo, or one vLLM behind policy.sync kind vllm)
//	rollout.partial_tokens      split each sample of step k deterministically: its first N policy tokens from checkpoint k-1, the rest from checkpoint k, so a killed run resumes to the same bits (0: a push interrupts wherever it lands; needs rollout.partial and the in-process policy)
//	rollout.carry               close a step's batch at the push that starts the next step's rollout: groups with unfinished samples are persisted under the step (carry/) and finished and trained in the next step, so the learner never waits for a step's slowest samples (false; needs rollout.partial, not with partial_tokens or advantage.dynamic_sampling)
//	rollout.carry_min_finished  share of a step's groups that must have finished for its batch to close; below it the samples go on inside the step (0.5; needs rollout.carry)
//	rollout.carry_max_steps     the most steps a group may be carried: one carried that often is finished inside the step it is carried into, across the next push (2; 0: the run's steps; needs rollout.carry)
//	rollout.prompts_per_batch   prompts per rollout element, 0 for 4*max_in_flight/group_size (0)
//	rollout.max_failed_fraction share of a step's samples that may fail (error) before the step fails; all failing always fails (0.5)
//	rollout.system_prompt       system prompt template, inline (built-in text describing the agents)
//	rollout.system_prompt_file  system prompt template file, relative to the config file
//	rollout.prompt_template     prompt text template, fields .System .Problem .ID .DataSource (ChatML with the system prompt)
//	rollout.chat_template       the model's Jinja chat template: a tokenizer_config.json or its directory, relative to the
//	                            config file, or none for prompt_template (unset: <run.dir>/checkpoints/step-000000's when
//	                            it has a chat_template and prompt_template is unset, else prompt_template, said once);
//	                            renders a system turn (the system prompt) and a user turn (the problem), generation prompt on
//	rollout.enable_thinking     the chat template's enable_thinking; Qwen3: false adds an empty think block (unset)
//	rollout.limit_notice        answer to tags beyond max_interactions ("interaction limit reached; continue on your own")
//	rollout.guidance            off-policy guidance traces mixed into each group, LUFFY's way (off)
//	rollout.guidance.source     solution (the prompt's reference solution, ending in its answer) or teacher (none: off)
//	rollout.guidance.traces     samples of each group that are traces, leaving at least one sampled (1, LUFFY's 1 of 8)
//	rollout.guidance.teacher    source teacher: the model writing traces, a collaborator role (fields as collaborators.ROLE;
//	                            unset system and prompt: a step-by-step solution ending in \boxed{})
//
//	collaborators               the agents; leave out for none (the demo: all three built in, knowledge noise 0.2)
//	collaborators.ROLE          one agent: verify, knowledge or reason (see transforms/collab)
//	collaborators.ROLE.kind     builtin-demo, openai or grpc
//	collaborators.ROLE.endpoint server: API base URL (openai) or host:port, grpcs://host:port for TLS (grpc)
//	collaborators.ROLE.model    model name sent to an openai endpoint
//	collaborators.ROLE.system   system prompt template of an openai role (built-in text)
//	collaborators.ROLE.system_file          the same from a file
//	collaborators.ROLE.prompt   user message template of an openai role (built-in text)
//	collaborators.ROLE.prompt_file          the same from a file
//	collaborators.ROLE.api_key_env          environment variable holding the API key or bearer token
//	collaborators.ROLE.api_key_file         file holding it
//	collaborators.ROLE.tls_ca_file          PEM CA of a grpcs:// or https:// endpoint's certificate (system roots)
//	collaborators.ROLE.temperature          an openai role's sampling temperature (0)
//	collaborators.ROLE.max_generate_tokens  an openai role's generation cap (256)
//	collaborators.ROLE.documents            documents an openai knowledge role writes per query (1)
//	collaborators.ROLE.noise                knowledge only: probability of a deliberately noisy answer (none)
//	collaborators.ROLE.noise.constant       the same probability every step
//	collaborators.ROLE.noise.start          curriculum probability at step 0
//	collaborators.ROLE.noise.end            curriculum probability at total_steps
//	collaborators.ROLE.noise.base           curriculum base (4)
//	collaborators.ROLE.noise.total_steps    curriculum length in steps
//	collaborators.ROLE.timeout              per-attempt timeout (30s)
//	collaborators.ROLE.max_concurrency      calls in flight per endpoint (16)
//	collaborators.ROLE.retries              retries of retryable failures (3)
//	collaborators.ROLE.backoff              retry waits
//	collaborators.ROLE.backoff.initial      first wait ceiling (100ms)
//	collaborators.ROLE.backoff.max          largest wait (5s)
//	collaborators.ROLE.breaker              circuit breaker of the endpoint
//	collaborators.ROLE.breaker.failures     consecutive failures that open it, negative disables (5)
//	collaborators.ROLE.breaker.cooldown     wait before a probe (10s)
//	collaborators.ROLE.cache                per-run answer cache (true)
//	collaborators.ROLE.context  what the agent is sent besides the query: query, problem or full (the
//	                            response so far too); full for verify and reason, problem for knowledge,
//	                            query for builtin-demo (see docs/operators.md)
//	collaborators.demo_task     the task builtin-demo agents answer about (the demo source's data.sources[].task; must match it)
//	collaborators.cache_entries answers the cache keeps over all roles (65536)
//
//	reward.data_source          verifier for every prompt instead of each prompt's data_source (none)
//	reward.strict               training rewards from the format's marked answer only: \boxed{} for math and
//	                            integers, a boxed letter for choices; no last-number fall-back (true;
//	                            aipo eval keeps its own, lenient extraction)
//	reward.score_truncated      score responses the length budget cut off instead of giving them 0 (false)
//
//	advantage.method            grpo, drgrpo or rloo (from learner.loss.base: grpo)
//	advantage.epsilon           added to GRPO's std (1e-6)
//	advantage.population_std    divide by the population std instead of the sample std (false)
//	advantage.dynamic_sampling  DAPO: drop groups whose rewards are all equal and refill the batch from further
//	                            prompts; the manifest counts prompts drawn, groups kept, dropped and surplus (false)
//	advantage.max_refill_rounds draws of further prompts after the first, 0 drops without refilling (8)
//	advantage.overlong          DAPO's soft overlong penalty
//	advantage.overlong.enabled  turn it on (false)
//	advantage.overlong.max_length           response budget L_max in tokens (0: policy.max_response_tokens)
//	advantage.overlong.cache    penalty zone L_cache before max_length (0 with max_length 0: a fifth of it)
//	advantage.overlong.factor   penalty scale (1)
//
//	learner.loss                the objective (see learner/loss)
//	learner.loss.base           a preset of every algorithm field of learner.loss and advantage (grpo);
//	                            fields written override it. The defaults here are grpo's; the bases
//	                            and what each sets: docs/algorithms.md (loss.Bases, runconfig.PresetTable)
//	learner.loss.clip_low       eps_low (0.2)
//	learner.loss.clip_high      eps_high, clip-higher (0.28)
//	learner.loss.dual_clip      dual-clip bound, 0 off (0)
//	learner.loss.seq_clip_low   GSPO sequence clip low (3e-4)
//	learner.loss.seq_clip_high  GSPO sequence clip high (4e-4)
//	learner.loss.external       tokens the policy did not sample (collaborators', guidance traces): aipo, ratio (w/o IS),
//	                            plain (w/o CS), mask, or luffy (LUFFY's shaping pi/(pi+gamma), no clip) (aipo)
//	learner.loss.omega          AIPO lower bound (0.2)
//	learner.loss.gamma          LUFFY's shaping constant under external luffy (0.1)
//	learner.loss.kl_coef        k3 KL coefficient, 0 off (0.001)
//	learner.loss.kl_external    KL on external tokens too (false)
//	learner.loss.aggregation    eq8, token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm
//	                            (eq8)
//	learner.loss.norm_tokens    divisor of seq-mean-token-sum-norm (16384)
//	learner.loss.rollout_correction        truncated importance sampling on pi_old/pi_behav (docs/operators.md)
//	learner.loss.rollout_correction.level  off, token, sequence (product) or geometric (mean) (off)
//	learner.loss.rollout_correction.cap    largest weight C > 1; mask mode keeps [1/C, C] (2)
//	learner.loss.rollout_correction.mode   truncate (min(rho, C)), mask (drop tokens outside) or mask_high (drop tokens above C, keep w = rho below: with level token, AReaL's decoupled PPO) (truncate)
//	learner.optim               AdamW (see learner/optim)
//	learner.optim.lr            peak learning rate (1e-6)
//	learner.optim.beta1         first-moment decay (0.9)
//	learner.optim.beta2         second-moment decay (0.999)
//	learner.optim.eps           denominator epsilon (1e-8)
//	learner.optim.weight_decay  decoupled weight decay (0.01)
//	learner.optim.grad_clip     global gradient norm bound, 0 off (1.0)
//	learner.optim.schedule      constant or warmup-cosine (constant)
//	learner.optim.warmup_steps  linear warmup updates (0)
//	learner.optim.total_steps   cosine horizon (200)
//	learner.optim.min_lr_ratio  cosine floor as a share of lr (0)
//	learner.micro_batch_tokens  tokens per forward/backward pass (16384)
//	learner.ppo_epochs          passes over a step's trajectories (1)
//	learner.mini_batches        optimiser updates per pass (1)
//	learner.backend             cpu, or cuda: the learner's passes and aipo train's rollout engine on GPU 0 (learner/cuda) (cpu)
//	learner.precision           fp32, or bf16: mixed precision as torch.autocast: the matrix products' operands (weights, activations, backward) in bfloat16,
//	                            float32 accumulation, master weights, gradients, their reduction and AdamW; cpu and cuda, every learner.zero (fp32)
//	learner.objective           rl, or rejection-sft (Expert Iteration: SFT on correct trajectories) (rl)
//	learner.activation_checkpointing  auto, on, off or offload: keep each layer's input only, recompute the layer in the backward pass; auto: on above 1 GiB of a micro-batch's activations; offload: on, the inputs in host memory instead of the GPU's (cuda) (auto)
//	learner.zero                ZeRO stage of a group of learner processes (aipo train --nproc N): 1 shards the AdamW
//	                            moments, 2 also reduces the gradients layer by layer during the backward pass, 3 also shards
//	                            the weights (cpu and cuda, fp32 and bf16); with learner.lora 1, or 3: the frozen base
//	                            sharded; same bits (1)
//	learner.keep_gathered_mib   at learner.zero 3 on cpu, MiB of gathered weights a rank keeps between passes until the
//	                            optimiser's step: the units that fit are gathered once a mini-batch; same bits (0: none)
//	learner.deterministic       a group of learner processes ends with the same bits at 1, 2, 4 and 8 ranks (8 virtual
//	                            shards a mini-batch); false: one shard a rank, faster, within float32 rounding (true)
//	learner.lora                train a LoRA adapter on the frozen policy instead of every weight (docs/lora.md) (off)
//	learner.lora.rank           the adapters' rank r (required with learner.lora)
//	learner.lora.alpha          the adapters' output is scaled by alpha/rank (2 x rank)
//	learner.lora.dropout        dropout on the adapters' input in the training passes, as PEFT's lora_dropout (0)
//	learner.lora.targets[]      projections adapted, PEFT's names: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, or all-linear (all)
//	learner.lora.init           a new adapter's A: default (Kaiming-uniform, PEFT's) or gaussian; B starts at zero (default)
//	learner.lora.adapter        a PEFT adapter directory to continue from (aipo train --init-adapter) (none: a new adapter)
//
//	eval.every                  steps between evaluations, 0 off (10)
//	eval.samples                k of Avg@k and Pass@k (4)
//	eval.splits[]               splits of the task the policy is evaluated alone on, with the eval pipeline (one greedy response and
//	                            eval.samples samples a problem), results in <run>/evalsplits/step-NNNNNN (kind demo: seen, unseen, all; seen and unseen)
//	eval.benchmarks[]           held-out benchmarks evaluated with the eval pipeline every eval.every steps, results in
//	                            <run>/eval/step-NNNNNN and metrics.jsonl, shown by aipo analyze (none)
//	eval.benchmarks[].name      report name (default: the preset)
//	eval.benchmarks[].preset    an eval preset: aime24, aime25, amc23, math500, gsm8k, mbpp, mbpp_sanitized, humaneval
//	eval.benchmarks[].path      the file, relative to the config file (default: the preset's copy bundled in the binary, data/benchmarks)
//	eval.benchmarks[].format    as data.sources[].format
//	eval.benchmarks[].fields    as data.sources[].fields (default: the preset's)
//	eval.benchmarks[].fields.problem        as data.sources[].fields.problem
//	eval.benchmarks[].fields.answer         as data.sources[].fields.answer
//	eval.benchmarks[].fields.solution       as data.sources[].fields.solution
//	eval.benchmarks[].fields.id             as data.sources[].fields.id
//	eval.benchmarks[].fields.answer_marker  as data.sources[].fields.answer_marker
//	eval.benchmarks[].fields.drop           as data.sources[].fields.drop
//	eval.benchmarks[].fields.keep           as data.sources[].fields.keep
//	eval.benchmarks[].fields.messages       as data.sources[].fields.messages
//	eval.benchmarks[].fields.data_source    as data.sources[].fields.data_source
//	eval.benchmarks[].verifier  a transforms/verify data source, or mbpp / humaneval (the preset's; math)
//	eval.benchmarks[].template  math, mbpp, humaneval, plain, or a text/template (the preset's; plain)
//	eval.benchmarks[].samples   n of this benchmark (eval.samples)
//	eval.benchmarks[].max_tokens            response budget of this benchmark (eval.max_response_tokens)
//	eval.benchmarks[].limit     the first limit problems only, 0 all (0)
//	eval.benchmarks[].breakdown extra fields whose values get their own report rows (the preset's)
//	eval.temperature            evaluation temperature, 0 greedy (1.0, the paper's)
//	eval.max_response_tokens    evaluation response budget (policy.max_response_tokens)
//
//	checkpoint                  what the learner writes each step and what the run keeps (every checkpoint holds
//	                            the serving weights in the model's dtype; full ones also the float32 masters and
//	                            the optimiser, from which a run resumes, replaying the learner steps since)
//	checkpoint.save_every       steps between full training states; also full: step 0 and the last step (10)
//	checkpoint.keep_last        newest checkpoints kept; 0 keeps all. Always kept: step 0, the newest full state,
//	                            the checkpoint of a step still being rolled out (3)
//	checkpoint.keep_every       also keep the checkpoints of steps that are multiples of it, 0 none (0)
//	checkpoint.max_shard_size   largest weights file, in bytes; above it the weights are written as
//	                            model-0000i-of-0000n.safetensors shards and their index, the same files at
//	                            any --nproc, rank r writing shards i with i mod N == r (5000000000)
package runconfig
