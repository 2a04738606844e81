package runconfig

import (
	"errors"
	"fmt"
	"github.com/aipo-rl/aipo/learner/model"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/policy/servers"
	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// fieldError names the field at fault.
func fieldError(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// Validate reports the first invalid field, naming it ("rollout.group_size:
// ...") and what to write instead. Call Fill first.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateRun, c.validateData, c.validatePolicy, c.validateRollout, c.validateScoring, c.validateLearner, c.validateEval, c.validateCheckpoint} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateRun() error {
	switch {
	case strings.TrimSpace(c.Run.Dir) == "":
		return fieldError("run.dir", "is required: the run directory, a local path or gs://bucket/path")
	case strings.ContainsAny(c.Run.Name, "/\\\x00") || strings.TrimSpace(c.Run.Name) == "":
		return fieldError("run.name", "%q must be a non-empty name without slashes", c.Run.Name)
	case c.Run.Steps < 1:
		return fieldError("run.steps", "%d must be at least 1", c.Run.Steps)
	}
	return nil
}

func (c Config) validateData() error {
	d := c.Data
	if err := d.Shorthand.check(len(d.Sources)); err != nil {
		return err
	}
	if err := d.Sources.Check(); err != nil {
		return err
	}
	if d.BatchSize < 1 {
		return fieldError("data.batch_size", "%d must be at least 1", d.BatchSize)
	}
	return nil
}

func (c Config) validatePolicy() error {
	p := c.Policy
	if p.Endpoint != "" {
		u, err := url.Parse(p.Endpoint)
		if err != nil || u.Scheme == "" {
			return fieldError("policy.endpoint", "%q is not a URI such as inproc:///runs/x/checkpoints/step-000001, grpc://127.0.0.1:7070 or http://127.0.0.1:8000/v1?model=name", secure.RedactURI(p.Endpoint))
		}
	}
	switch p.DType {
	case "", "auto", "float32":
	case "bfloat16":
		if !c.InProcessPolicy() {
			return fieldError("policy.dtype", "bfloat16 chooses aipo train's own engine's products, but policy.endpoint %s is a server with a precision of its own (aipo serve --dtype, vLLM --dtype); leave policy.dtype out", secure.RedactURI(p.Endpoint))
		}
		// On the cpu backend the engine's bfloat16 products need the
		// CPU's instructions; a device backend decodes on the device
		// (cuda holds bfloat16 itself; inproc.Loaded.OpenDecoder).
		if ok, why := model.BF16DecodeAvailable(); !ok && c.Learner.Backend == BackendCPU {
			return fieldError("policy.dtype", "bfloat16 needs bfloat16 products (oneDNN's AMX or AVX512-BF16 kernels, or aipo's own on AVX2 and FMA), and this process has none: %s; use float32 or auto", why)
		}
	default:
		return fieldError("policy.dtype", "%q: use auto, bfloat16 or float32", p.DType)
	}
	switch {
	case !(p.Temperature >= 0) || math.IsInf(float64(p.Temperature), 0):
		return fieldError("policy.temperature", "%v must be finite and >= 0 (0 is greedy)", p.Temperature)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fieldError("policy.top_p", "%v must lie in (0, 1] (1 is off)", p.TopP)
	case p.TopK < 0:
		return fieldError("policy.top_k", "%d must not be negative (0 is off)", p.TopK)
	case p.MaxResponseTokens < 1:
		return fieldError("policy.max_response_tokens", "%d must be at least 1", p.MaxResponseTokens)
	case p.Retries < 0 || p.Retries > 20:
		return fieldError("policy.retries", "%d must be in 0..20", p.Retries)
	case p.BackoffInitial < 0 || p.BackoffMax < 0:
		return fieldError("policy.backoff_initial", "%v and backoff_max %v must not be negative", p.BackoffInitial, p.BackoffMax)
	case p.Timeout < 0:
		return fieldError("policy.timeout", "%v must not be negative (0: no bound)", p.Timeout)
	}
	for i, s := range p.StopStrings {
		if s == "" {
			return fieldError(fmt.Sprintf("policy.stop[%d]", i), "is empty")
		}
	}
	if p.MaxStaleness != nil {
		switch m := *p.MaxStaleness; {
		case m < 0:
			return fieldError("policy.max_staleness", "%d must not be negative (0: every trajectory of step k sampled by checkpoint k)", m)
		case m == 0 && c.Run.Async:
			return fieldError("policy.max_staleness", "is 0, but run.async samples step k with checkpoint k-1: leave it out (1) or raise it")
		}
	}
	return c.validateSync()
}

// validateSync checks policy.sync against the policy endpoint and what
// its kind's registration (weightsync.Kind) says.
func (c Config) validateSync() error {
	s := c.Policy.Sync
	const f = "policy.sync."
	k, err := weightsync.Lookup(s.Kind)
	if err != nil {
		return fieldError(f+"kind", "%v", err)
	}
	switch {
	case !k.Pushes() && len(s.Endpoints) > 0:
		return fieldError(f+"endpoints", "are set but policy.sync.kind is %s: name the servers' reload protocol, %s", k.Name, weightsync.Choices(weightsync.Kind.Pushes))
	case k.Pushes() && c.InProcessPolicy():
		return fieldError(f+"kind", "%s pushes checkpoints to policy servers, but policy.endpoint is aipo train's own engine: set policy.endpoint to the servers' address, or leave policy.sync out", k.Name)
	case s.Timeout < 0:
		return fieldError(f+"timeout", "%v must not be negative (0: the default, %v)", s.Timeout, DefaultSyncTimeout)
	case s.LoadFormat != "" && !k.LoadFormat:
		takers := weightsync.Names(func(k weightsync.Kind) bool { return k.LoadFormat })
		return fieldError(f+"load_format", "is the load_format of %s servers, but policy.sync.kind is %s", strings.Join(takers, " and "), k.Name)
	case s.CheckpointDir != "" && !k.Pushes():
		return fieldError(f+"checkpoint_dir", "is set but policy.sync.kind is %s", k.Name)
	}
	for i, e := range s.Endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" {
			return fieldError(fmt.Sprintf(f+"endpoints[%d]", i), "%q is not a URI such as %s", secure.RedactURI(e), k.Example)
		}
		if !slices.Contains(k.Schemes, u.Scheme) {
			return fieldError(fmt.Sprintf(f+"endpoints[%d]", i), "%q: %s servers are reached by %s, not %s", secure.RedactURI(e), k.Name, strings.Join(k.Schemes, " or "), u.Scheme)
		}
	}
	if k.Pushes() && len(c.SyncEndpoints()) == 0 {
		return fieldError(f+"endpoints", "are needed: policy.endpoint %s does not say where %s's control address is; list every replica, such as %s", secure.RedactURI(c.Policy.Endpoint), k.Name, k.Example)
	}
	return nil
}

// SyncEndpoints are the control addresses policy.sync pushes checkpoints
// to: policy.sync.endpoints, or the one the policy endpoint implies when
// its scheme is one of the kind's (weightsync.Kind.Schemes): its scheme,
// host and port, with its token and CA parameters. None for a kind that
// tells no server (none), or one nobody registered.
func (c Config) SyncEndpoints() []string {
	s := c.Policy.Sync
	k, err := weightsync.Lookup(s.Kind)
	if err != nil || !k.Pushes() {
		return nil
	}
	if len(s.Endpoints) > 0 {
		return append([]string(nil), s.Endpoints...)
	}
	u, err := url.Parse(c.Policy.Endpoint)
	if err != nil || u.Host == "" || !slices.Contains(k.Schemes, u.Scheme) {
		return nil
	}
	q := url.Values{}
	for _, k := range []string{"token_env", "token_file", "ca"} {
		if v := u.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	d := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: q.Encode()}
	return []string{d.String()}
}

func (c Config) validateRollout() error {
	r := c.Rollout
	switch {
	case r.GroupSize < 2:
		return fieldError("rollout.group_size", "%d is too small: group advantages need at least 2 samples per prompt (paper: 8)", r.GroupSize)
	case r.MaxInteractions < 0:
		return fieldError("rollout.max_interactions", "%d must not be negative (paper: 3; 0 turns the agents off)", r.MaxInteractions)
	case r.OpenerBy != "system" && r.OpenerBy != "policy":
		return fieldError("rollout.opener_by", "%q is unknown: use system (the system writes <result>) or policy (the policy writes it)", r.OpenerBy)
	case r.TemplateTokens != TemplateUntrained && r.TemplateTokens != TemplateExternal:
		return fieldError("rollout.template_tokens", "%q is unknown: use %s or %s", r.TemplateTokens, TemplateUntrained, TemplateExternal)
	case r.AnswerTokenBudget < 1:
		return fieldError("rollout.answer_token_budget", "%d must be at least 1", r.AnswerTokenBudget)
	case !(r.InteractionCost >= 0) || math.IsInf(r.InteractionCost, 0):
		return fieldError("rollout.interaction_cost", "%v must be finite and >= 0", r.InteractionCost)
	case r.MaxInFlight < 1:
		return fieldError("rollout.max_in_flight", "%d must be at least 1", r.MaxInFlight)
	case r.PartialTokens < 0:
		return fieldError("rollout.partial_tokens", "%d must not be negative (0: a push interrupts the samples in flight wherever they are)", r.PartialTokens)
	case r.PartialTokens > 0 && !r.Partial:
		return fieldError("rollout.partial_tokens", "needs rollout.partial: true (it fixes where a partial sample moves to the next checkpoint); set it, or drop partial_tokens")
	case r.PartialTokens > 0 && !c.InProcessPolicy():
		return fieldError("rollout.partial_tokens", "needs the in-process policy (policy.endpoint inproc): only the in-process engine keeps two checkpoints and samples each call with the one it names; with servers leave it 0 (the push interrupts the samples in flight)")
	case r.Partial && !c.Run.Async:
		return fieldError("rollout.partial", "needs run.async: true (a synchronous run pushes no weights while a step is sampled, so there is nothing to continue)")
	case r.Partial && !c.InProcessPolicy() && c.Policy.Sync.Kind == servers.SGLang:
		return fieldError("rollout.partial", "is not built for SGLang: its abort-and-continue (POST /pause_generation, /continue_generation) cannot be run or tested on the CPU machines this project tests on (SGLang does not start there, docs/operators.md), so turn rollout.partial off, or use vLLM (policy.sync.kind: vllm) or aipo serve --interrupt-on-reload (kind aipo)")
	case r.Partial && !c.InProcessPolicy() && c.Policy.Sync.Kind == servers.VLLM && len(c.Policy.Sync.Endpoints) > 1:
		return fieldError("rollout.partial", "with policy.sync.kind vllm needs one vLLM (policy.sync.endpoints has %d): the rollout client tells which weights sampled an answer by the weight version it reads through policy.endpoint around the completion, and behind a load balancer those reads may reach another replica than the completion did, whose pushes are not in step with it; use one vLLM, or turn rollout.partial off", len(c.Policy.Sync.Endpoints))
	case r.Partial && !c.InProcessPolicy() && c.Policy.Sync.Kind != servers.Aipo && c.Policy.Sync.Kind != servers.VLLM:
		return fieldError("rollout.partial", "needs policy.sync.kind: aipo (aipo serve replicas started with --interrupt-on-reload) or vllm (each push pauses vLLM with mode abort); without a push (kind %q) nothing stops the generations in flight, so set one or turn rollout.partial off", c.Policy.Sync.Kind)
	case r.Carry && !r.Partial:
		return fieldError("rollout.carry", "needs rollout.partial: true (and run.async): only a push that interrupts the samples in flight leaves samples to carry into the next step; set both, or drop carry")
	case r.Carry && r.PartialTokens > 0:
		return fieldError("rollout.carry", "does not go with rollout.partial_tokens %d: the split samples every step's tokens at fixed checkpoints and no push interrupts anything, so nothing would be carried; drop one of them", r.PartialTokens)
	case r.Carry && c.Advantage.DynamicSampling:
		return fieldError("rollout.carry", "does not go with advantage.dynamic_sampling: its refill draws decide a step's batch from every group's rewards, which carried groups do not have yet; turn one of them off")
	case r.CarryMinFinished != nil && !r.Carry:
		return fieldError("rollout.carry_min_finished", "is set but rollout.carry is off; set carry: true, or drop carry_min_finished")
	case r.CarryMinFinished != nil && !(*r.CarryMinFinished > 0 && *r.CarryMinFinished <= 1):
		return fieldError("rollout.carry_min_finished", "%v must be above 0 and at most 1 (the share of a step's groups that must have finished for its batch to close; default 0.5)", *r.CarryMinFinished)
	case r.CarryMaxSteps != nil && !r.Carry:
		return fieldError("rollout.carry_max_steps", "is set but rollout.carry is off; set carry: true, or drop carry_max_steps")
	case r.CarryMaxSteps != nil && *r.CarryMaxSteps < 0:
		return fieldError("rollout.carry_max_steps", "%d must not be negative (the most steps a group may be carried; 0: no bound but the run's steps; default %d)", *r.CarryMaxSteps, DefaultCarryMaxSteps)
	case r.MaxFailedFraction != nil && !(*r.MaxFailedFraction >= 0 && *r.MaxFailedFraction <= 1):
		return fieldError("rollout.max_failed_fraction", "%v must be between 0 (no sample may fail) and 1 (any share may, short of all)", *r.MaxFailedFraction)
	case r.PromptsPerBatch < 0:
		return fieldError("rollout.prompts_per_batch", "%d must not be negative (0: automatic)", r.PromptsPerBatch)
	case r.SystemPrompt != "" && r.SystemPromptFile != "":
		return fieldError("rollout.system_prompt", "set system_prompt or system_prompt_file, not both")
	case storage.MissingLocal(r.SystemPromptFile):
		return fieldError("rollout.system_prompt_file", "%s does not exist (relative paths are relative to the config file)", r.SystemPromptFile)
	case r.ChatTemplate != "" && r.ChatTemplate != ChatTemplateNone && r.PromptTemplate != "":
		return fieldError("rollout.chat_template", "set chat_template (the model's template) or prompt_template (ours), not both")
	case r.ChatTemplate != ChatTemplateNone && storage.MissingLocal(r.ChatTemplate):
		return fieldError("rollout.chat_template", "%s does not exist: name a tokenizer_config.json or the directory holding one (relative paths are relative to the config file), or none for prompt_template", r.ChatTemplate)
	case r.EnableThinking != nil && r.ChatTemplate == ChatTemplateNone:
		return fieldError("rollout.enable_thinking", "is a chat template's switch, and chat_template is none")
	}
	if err := c.Interact().Validate(); err != nil {
		return fieldError("rollout", "%v", err)
	}
	if err := r.Guidance.Validate(r.GroupSize); err != nil {
		return err
	}
	return nil
}

// validateScoring checks what scores a trajectory: the collaborators,
// the reward's verifier and the advantage estimator.
func (c Config) validateScoring() error {
	if len(c.Collaborators.Roles()) > 0 {
		if err := c.Collaborators.Validate(); err != nil {
			return fieldError("collaborators", "%v", err)
		}
	}
	def := c.Data.Sources.Defaults()
	if t := def.Collaborators.Task; t != "" && c.Collaborators.Task != "" && c.Collaborators.Task != t {
		return fieldError("collaborators.demo_task", "differs from the task of data.sources (kind %s): the built-in agents must answer about the run's task (leave collaborators.demo_task out)", c.Data.Sources[0].KindName())
	}
	if c.Reward.DataSource != "" {
		if _, err := verify.ForTraining(c.Reward.DataSource, c.Reward.IsStrict()); err != nil {
			return fieldError("reward.data_source", "%v", err)
		}
	}
	if err := c.Advantage.Validate(); err != nil {
		return fieldError("advantage", "%v", err)
	}
	return nil
}

// validateLearner checks the learner's section: the loss, the optimiser,
// the batch, the backend and its precision, the objective and activation
// checkpointing.
func (c Config) validateLearner() error {
	if err := validateRolloutCorrection(c.Learner.Loss.RolloutCorrection); err != nil {
		return err
	}
	if err := c.Learner.Loss.Validate(); err != nil {
		return fieldError("learner.loss", "%v", err)
	}
	if err := c.Learner.Optim.Validate(); err != nil {
		return fieldError("learner.optim", "%v", err)
	}
	l := c.Learner
	switch {
	case l.MicroBatchTokens < 1:
		return fieldError("learner.micro_batch_tokens", "%d must be at least 1", l.MicroBatchTokens)
	case l.PPOEpochs < 1:
		return fieldError("learner.ppo_epochs", "%d must be at least 1", l.PPOEpochs)
	case l.MiniBatches < 1:
		return fieldError("learner.mini_batches", "%d must be at least 1", l.MiniBatches)
	}
	if _, err := backend.Lookup(l.Backend); err != nil {
		return fieldError("learner.backend", "%v", err)
	}
	if l.Precision != PrecisionFP32 && l.Precision != PrecisionBF16 {
		return fieldError("learner.precision", "%q is unknown: use %s or %s", l.Precision, PrecisionFP32, PrecisionBF16)
	}
	if err := backend.CheckPrecision(l.Backend, l.Precision); err != nil {
		return fieldError("learner.precision", "%v", err)
	}
	switch {
	case l.Objective != ObjectiveRL && l.Objective != ObjectiveRejectionSFT:
		return fieldError("learner.objective", "%q is unknown: use %s or %s", l.Objective, ObjectiveRL, ObjectiveRejectionSFT)
	}
	switch l.ActivationCheckpointing {
	case trainer.CheckpointingAuto, trainer.CheckpointingOn, trainer.CheckpointingOff:
	case trainer.CheckpointingOffload:
		if b, err := backend.Lookup(l.Backend); err == nil && !backend.OffloadsInputs(b) {
			return fieldError("learner.activation_checkpointing", "%s keeps each layer's input in host memory instead of a GPU's, which the %s backend's passes do not use (learner.backend: cuda does): give %s", l.ActivationCheckpointing, l.Backend, trainer.CheckpointingOn)
		}
	default:
		return fieldError("learner.activation_checkpointing", "%q is unknown: use %s, %s, %s or %s", l.ActivationCheckpointing,
			trainer.CheckpointingAuto, trainer.CheckpointingOn, trainer.CheckpointingOff, trainer.CheckpointingOffload)
	}
	if l.Zero < 1 || l.Zero > 3 {
		return fieldError("learner.zero", "%d is not a ZeRO stage the learner has: use 1 (the AdamW moments sharded across the ranks), 2 (the gradients reduced layer by layer too) or 3 (the weights sharded as well)", l.Zero)
	}
	switch {
	case l.KeepGatheredMiB < 0:
		return fieldError("learner.keep_gathered_mib", "%d must not be negative (0 keeps no gathered weights between passes)", l.KeepGatheredMiB)
	case l.KeepGatheredMiB == 0:
	case l.Zero != 3:
		return fieldError("learner.keep_gathered_mib", "%d keeps gathered weights between the passes of ZeRO stage 3; learner.zero is %d, which gathers none: give learner.zero: 3 or remove it", l.KeepGatheredMiB, l.Zero)
	case l.Backend != BackendCPU:
		return fieldError("learner.keep_gathered_mib", "%d is built for stage 3 on the cpu backend; on %s every pass gathers the units it reads: remove it", l.KeepGatheredMiB, l.Backend)
	case c.LoRAOn():
		return fieldError("learner.keep_gathered_mib", "%d keeps the policy's gathered weights; a LoRA run's stage 3 gathers its frozen base, which it does not keep: remove it", l.KeepGatheredMiB)
	}
	return c.validateLoRA()
}

// validateEval checks the evaluations the run makes: the demo task's
// splits and the held-out benchmarks.
func (c Config) validateEval() error {
	def := c.Data.Sources.Defaults()
	e := c.Eval
	switch {
	case e.Every < 0:
		return fieldError("eval.every", "%d must not be negative (0 turns evaluation off)", e.Every)
	case e.Samples < 1:
		return fieldError("eval.samples", "%d must be at least 1", e.Samples)
	case !(e.Temperature >= 0) || math.IsInf(float64(e.Temperature), 0):
		return fieldError("eval.temperature", "%v must be finite and >= 0", e.Temperature)
	case e.MaxResponseTokens < 1:
		return fieldError("eval.max_response_tokens", "%d must be at least 1", e.MaxResponseTokens)
	}
	for i, s := range e.Splits {
		if def.EvalBenchmark == nil {
			return fieldError("eval.splits", "are splits of a task that names a benchmark for each (the demo's), but data.sources (%s) have none: evaluate them with eval.benchmarks", c.Data.Sources.Label())
		}
		if !slices.Contains(def.Splits, s) {
			return fieldError(fmt.Sprintf("eval.splits[%d]", i), "%q is unknown: use %s", s, strings.Join(def.Splits, ", "))
		}
	}
	seen := map[string]bool{}
	for i, b := range e.Benchmarks {
		field := fmt.Sprintf("eval.benchmarks[%d]", i)
		if err := b.Check(""); err != nil {
			return fieldError(field, "%v", err)
		}
		if storage.MissingLocal(b.Path) {
			return fieldError(field+".path", "%s does not exist (relative paths are relative to the config file)", b.Path)
		}
		if seen[b.Key()] {
			return fieldError(field, "benchmark %q is listed twice: give the second a name", b.Key())
		}
		seen[b.Key()] = true
	}
	return nil
}

func (c Config) validateCheckpoint() error {
	ck := c.Checkpoint
	switch {
	case ck.SaveEvery < 1:
		return fieldError("checkpoint.save_every", "%d must be at least 1 (1 writes the full training state at every step)", ck.SaveEvery)
	case ck.KeepLast < 0:
		return fieldError("checkpoint.keep_last", "%d must not be negative (0 keeps every checkpoint)", ck.KeepLast)
	case ck.KeepEvery < 0:
		return fieldError("checkpoint.keep_every", "%d must not be negative (0 keeps none beyond checkpoint.keep_last)", ck.KeepEvery)
	case ck.MaxShardSize < 0:
		return fieldError("checkpoint.max_shard_size", "%d must be a number of bytes, not negative (the default, %d, is Hugging Face's 5 GB)", ck.MaxShardSize, DefaultMaxShardSize)
	}
	return nil
}

// ErrNoEndpoint is returned by RequireEndpoint.
var ErrNoEndpoint = errors.New("policy.endpoint is empty: set it in the config or pass --policy URI")

// RequireEndpoint reports ErrNoEndpoint when no policy endpoint is set.
func (c Config) RequireEndpoint() error {
	if c.Policy.Endpoint == "" {
		return ErrNoEndpoint
	}
	return nil
}

// validateRolloutCorrection checks learner.loss.rollout_correction, naming
// its fields as the run YAML writes them. Cap and mode are checked with the
// correction off too, so that a mistake does not wait for the day it is
// turned on.
func validateRolloutCorrection(rc loss.RolloutCorrection) error {
	const f = "learner.loss.rollout_correction."
	switch rc.Level {
	case loss.CorrectionOff, loss.CorrectionToken, loss.CorrectionSequence, loss.CorrectionGeometric:
	default:
		return fieldError(f+"level", "%q is unknown: use off, token, sequence (the product of the ratios over a trajectory's policy tokens) or geometric (their geometric mean)", rc.Level)
	}
	if !(rc.Cap > 1) || math.IsInf(rc.Cap, 0) {
		return fieldError(f+"cap", "%v must be finite and > 1: it is the largest weight, and mask mode keeps ratios in [1/cap, cap] (typical: 1.5-5 at token level, 2-10 at sequence level, 1.0002-1.001 at geometric level)", rc.Cap)
	}
	if rc.Mode != loss.CorrectionTruncate && rc.Mode != loss.CorrectionMask && rc.Mode != loss.CorrectionMaskHigh {
		return fieldError(f+"mode", "%q is unknown: use truncate (weights capped at cap), mask (tokens outside [1/cap, cap] left out of the loss) or mask_high (tokens above cap left out, the others weighted by their ratio: with level token, AReaL's decoupled PPO)", rc.Mode)
	}
	return nil
}
