package rollout

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/runlease"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/chattemplate"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/parquetio"
	"github.com/aipo-rl/aipo/transforms/policy"
	"github.com/aipo-rl/aipo/transforms/prompts"
	"github.com/aipo-rl/aipo/transforms/trajectories"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Options choose the step to roll out.
type Options struct {
	Config runconfig.Config
	Step   int64
	// Policy, when set, replaces Config.Policy.Endpoint.
	Policy string
	// Force rewrites a step that is already committed.
	Force bool
	// DryRun says that the runner only translates the pipeline and runs
	// it nowhere (Dataflow's --dry_run): Run then needs no lease, since
	// nothing is written, removes no manifest with Force, and returns a
	// zero manifest.
	DryRun bool
	// MaxShardRows caps the rows per shard (0: parquetio's default).
	MaxShardRows int
	// Carried are the groups the step before carried into this one
	// (rollout.carry; trajectories.CarriedGroup in JSON): Run reads them
	// from that step's carry directory.
	Carried []string
}

// Spec returns the rollout transforms' settings for o.
func Spec(ctx context.Context, o Options) (trajectories.Spec, error) {
	c := o.Config
	if o.Policy != "" {
		c.Policy.Endpoint = o.Policy
	}
	if err := c.RequireEndpoint(); err != nil {
		return trajectories.Spec{}, err
	}
	if o.Step < 0 {
		return trajectories.Spec{}, fmt.Errorf("rollout: step %d must not be negative", o.Step)
	}
	if u, err := url.Parse(c.Policy.Endpoint); err != nil || !slices.Contains(policy.Schemes(), u.Scheme) {
		return trajectories.Spec{}, fmt.Errorf("rollout: policy endpoint %q: no client for its scheme is linked into this program (known: %s)", secure.RedactURI(c.Policy.Endpoint), strings.Join(policy.Schemes(), ", "))
	}
	sys, err := c.SystemPrompt(ctx)
	if err != nil {
		return trajectories.Spec{}, err
	}
	chat, err := ChatTemplate(ctx, c)
	if err != nil {
		return trajectories.Spec{}, err
	}
	spec := trajectories.Spec{
		Run:              c.Run.Name,
		Step:             o.Step,
		Seed:             c.Run.Seed,
		PolicyEndpoint:   c.Policy.Endpoint,
		Interact:         c.Interact(),
		Collaborators:    c.Collaborators,
		CollabBaseDir:    c.BaseDir(),
		SystemPrompt:     sys,
		PromptTemplate:   c.Rollout.PromptTemplate,
		GroupSize:        c.Rollout.GroupSize,
		MaxInFlight:      c.Rollout.MaxInFlight,
		PromptsPerBatch:  c.Rollout.PromptsPerBatch,
		InteractionCost:  c.Rollout.InteractionCost,
		RewardDataSource: c.Reward.DataSource,
		RewardStrict:     c.Reward.IsStrict(),
		ScoreTruncated:   c.Reward.ScoreTruncated,
		Advantage:        c.Advantage,
		Guidance:         c.Rollout.Guidance,
	}
	if r := c.Rollout; r.Partial && r.PartialTokens > 0 && c.Run.Async {
		// Step k's first tokens from checkpoint k-1, the rest from k
		// (step 0's all from checkpoint 0, the only one before it).
		spec.Interact.Split = interact.Split{Pin: true, First: max(o.Step-1, 0), Next: o.Step}
		if o.Step > 0 {
			spec.Interact.Split.Tokens = r.PartialTokens
		}
	}
	if c.Rollout.Carry {
		// The groups carried into a step as often as the bound allows
		// finish in it and count as finished at the bound.
		spec.Carry = trajectories.Carry{MaxSteps: c.Rollout.CarryBound()}
		if o.Step < c.Run.Steps-1 {
			// The last step carries nothing out (no step after it would
			// train it): no directory, no gate.
			var key [8]byte
			_, _ = rand.Read(key[:])
			spec.Carry.Dir, spec.Carry.MinGroups = rundir.Carry(rundir.Step(c.Run.Dir, o.Step)), c.Rollout.CarryMinGroups(c.Data.BatchSize)
			spec.Carry.Key = fmt.Sprintf("%s/%d/%x", c.Run.Dir, o.Step, key)
		}
	}
	if chat != nil {
		spec.ChatTemplate, spec.ChatTemplateFile, spec.EnableThinking = chat.Source(), chat.File(), c.Rollout.EnableThinking
		spec.ChatTokens = map[string]string{}
		for _, k := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
			if v, ok := chat.Special(k); ok {
				spec.ChatTokens[k] = v
			}
		}
	}
	return spec, spec.Validate()
}

// fallbackSaid holds the runs whose fallback from the chat template to the
// prompt template was said (once per run and process), on noticeOut.
var (
	fallbackSaid sync.Map
	noticeOut    io.Writer = os.Stderr
)

// ChatTemplate returns the chat template that renders c's prompts (see
// runconfig.Rollout.ChatTemplate), or nil for the prompt template. A
// configured file must hold a template that compiles; the initial
// checkpoint's file is used when it holds one, and its absence or a file
// without a template falls back to the prompt template, said once on
// standard error.
func ChatTemplate(ctx context.Context, c runconfig.Config) (*chattemplate.Template, error) {
	r := c.Rollout
	switch {
	case r.ChatTemplate == runconfig.ChatTemplateNone:
		return nil, nil
	case r.ChatTemplate != "":
		t, err := chattemplate.Load(ctx, r.ChatTemplate)
		if errors.Is(err, chattemplate.ErrNoTemplate) {
			return nil, fmt.Errorf("rollout.chat_template: %w; name a tokenizer_config.json that has one, or set chat_template: none to use prompt_template", err)
		}
		if err != nil {
			return nil, fmt.Errorf("rollout.chat_template: %w", err)
		}
		return t, nil
	case r.PromptTemplate != "":
		return nil, nil
	}
	file := storage.Join(rundir.Checkpoint(c.Run.Dir, 0), chattemplate.ConfigFile)
	t, err := chattemplate.Load(ctx, file)
	switch {
	case err == nil:
		return t, nil
	case errors.Is(err, storage.ErrNotExist), errors.Is(err, chattemplate.ErrNoTemplate):
		if _, said := fallbackSaid.LoadOrStore(c.Run.Dir, true); !said {
			why := "it does not exist"
			if errors.Is(err, chattemplate.ErrNoTemplate) {
				why = "it has no chat_template"
			}
			fmt.Fprintf(noticeOut, "rollout: prompts use rollout.prompt_template (the built-in ChatML when unset), not the model's chat template: %s %s; set rollout.chat_template to a tokenizer_config.json to use one, or to none to silence this\n", file, why)
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("rollout: the initial checkpoint's chat template: %w (set rollout.chat_template to another tokenizer_config.json, or to none to use prompt_template)", err)
	}
}

// StaticMeta is the manifest meta known before the step runs.
func StaticMeta(o Options, spec trajectories.Spec) map[string]string {
	c := o.Config
	m := map[string]string{
		"config_hash":         c.Hash(),
		"seed":                strconv.FormatUint(c.Run.Seed, 10),
		"group_size":          strconv.Itoa(spec.GroupSize),
		"max_interactions":    strconv.Itoa(spec.Interact.MaxInteractions),
		"opener_by":           spec.Interact.OpenerBy,
		"template_tokens":     c.Rollout.TemplateTokens,
		"interaction_cost":    strconv.FormatFloat(spec.InteractionCost, 'g', -1, 64),
		"answer_token_budget": strconv.Itoa(spec.Interact.AnswerTokenBudget),
		"data":                c.Data.Sources.Label(),
		"policy_endpoint":     secure.RedactURI(spec.PolicyEndpoint),
	}
	if spec.Guidance.On() {
		m["guidance"] = spec.Guidance.Source
	}
	return m
}

// Build adds the rollout of step o.Step to the pipeline and returns the
// manifest path (a PCollection<string> of one element). The step's commit
// checks the run directory's lease named by lease (zero: none) before it
// writes the manifest.
func Build(s beam.Scope, o Options, spec trajectories.Spec, lease runlease.Token) (beam.PCollection, error) {
	s = s.Scope("rollout")
	c := o.Config
	first, err := prompts.Draw(s, c.Data.Sources, prompts.Step{Seed: c.Run.Seed, Step: o.Step, Batch: c.Data.BatchSize, DeadLetters: c.DeadLetterPath(o.Step)})
	if err != nil {
		return beam.PCollection{}, fmt.Errorf("rollout: %w", err)
	}
	metas := append([]beam.PCollection{}, first.Meta...)
	var rows beam.PCollection
	if c.Advantage.DynamicSampling {
		var meta beam.PCollection
		rows, meta = dynamicSampling(s, o, spec, first)
		metas = append(metas, meta)
	} else {
		groups := trajectories.Sample(s, spec, trajectories.Batch(s, spec.BatchPrompts(), first.Slotted))
		if len(o.Carried) > 0 {
			groups = beam.Flatten(s, groups, trajectories.Resumed(s, spec, o.Carried))
		}
		var stats beam.PCollection
		rows, stats = trajectories.Advantages(s, spec, trajectories.Score(s, spec, groups))
		metas = append(metas, trajectories.StepMeta(s, stats))
	}
	check := trajectories.StepCheck{Step: o.Step, Sources: first.Files, DeadLetters: first.DeadLetters, MaxFailedFraction: c.Rollout.FailedFractionBound()}
	meta := parquetio.StepMeta{Run: c.Run.Name, Step: o.Step, Meta: StaticMeta(o, spec)}
	opts := []parquetio.WriteOption{parquetio.RequireMeta(records.CheckedMeta)}
	if o.MaxShardRows > 0 {
		opts = append(opts, parquetio.MaxShardRows(o.MaxShardRows))
	}
	if !lease.IsZero() {
		opts = append(opts, parquetio.Lease(lease))
	}
	dir := rundir.Step(c.Run.Dir, o.Step)
	return parquetio.WriteTrajectoriesMeta(s, dir, meta, trajectories.CheckStep(s, check, beam.Flatten(s, metas...)), rows, opts...), nil
}

// dynamicSampling rolls out the step under advantage.dynamic_sampling: the
// first draw, then up to advantage.max_refill_rounds further draws of
// prompts (the sources' Refill), each a stage fed the decisions of the ones
// before, until data.batch_size groups are kept; it returns the trained
// groups' trajectories and the step's meta (see transforms/trajectories's
// Refill, Trim and DecisionMeta).
func dynamicSampling(s beam.Scope, o Options, spec trajectories.Spec, first prompts.Drawn) (rows, meta beam.PCollection) {
	c := o.Config
	batch := c.Data.BatchSize
	slotted := first.Slotted
	var allRows, allDecisions []beam.PCollection
	for draw := 0; draw <= c.Advantage.MaxRefillRounds; draw++ {
		ds := s.Scope(fmt.Sprintf("draw%d", draw))
		if draw > 0 {
			slotted = first.Refill(ds, draw, beam.Flatten(ds, allDecisions...))
		}
		groups := trajectories.Sample(ds, spec, trajectories.Batch(ds, spec.BatchPrompts(), slotted))
		r, d := trajectories.Decide(ds, spec, draw, trajectories.Score(ds, spec, groups))
		allRows, allDecisions = append(allRows, r), append(allDecisions, d)
	}
	decisions := beam.Flatten(s, allDecisions...)
	return trajectories.Trim(s, batch, beam.Flatten(s, allRows...), decisions), trajectories.DecisionMeta(s, batch, decisions)
}

// RunStep rolls out step k of the run of cfg with the policy at
// cfg.Policy.Endpoint and commits it (Run, its manifest dropped): the
// rollout of aipo train's loop (train.Options.Rollout).
func RunStep(ctx context.Context, cfg runconfig.Config, k int64) error {
	_, err := Run(ctx, Options{Config: cfg, Step: k})
	return err
}

// Run rolls out one step on the runner named by Beam's --runner flag
// (prism by default) and returns the committed manifest. A step that is
// already committed is refused unless o.Force. ctx must carry the run
// directory's lease (the command that owns the run takes it): without it,
// unless o.DryRun, Run writes nothing and says so.
func Run(ctx context.Context, o Options) (schemas.Manifest, error) {
	if !o.DryRun {
		if err := runlease.Require(ctx, o.Config.Run.Dir); err != nil {
			return schemas.Manifest{}, fmt.Errorf("rollout: %w", err)
		}
	}
	spec, err := Spec(ctx, o)
	if err != nil {
		return schemas.Manifest{}, err
	}
	dir := rundir.Step(o.Config.Run.Dir, o.Step)
	if _, err := schemas.ReadManifest(ctx, dir); err == nil && !o.Force {
		return schemas.Manifest{}, fmt.Errorf("rollout: step %d of %s is already committed (%s); pass --force to roll it out again", o.Step, o.Config.Run.Dir, dir)
	} else if err != nil && !errors.Is(err, schemas.ErrNoManifest) {
		return schemas.Manifest{}, fmt.Errorf("rollout: %w", err)
	}
	if o.Force && !o.DryRun {
		if err := runlease.CheckContext(ctx); err != nil {
			return schemas.Manifest{}, fmt.Errorf("rollout: %w", err)
		}
		if err := schemas.Uncommit(ctx, dir); err != nil {
			return schemas.Manifest{}, fmt.Errorf("rollout: --force: remove the old manifest of %s: %w", dir, err)
		}
	}
	if err := carried(ctx, &o); err != nil {
		return schemas.Manifest{}, err
	}
	p, s := beam.NewPipelineWithRoot()
	if _, err := Build(s, o, spec, runlease.TokenFrom(ctx)); err != nil {
		return schemas.Manifest{}, err
	}
	if err := beamrun.Run(ctx, p); err != nil {
		if refusal, ok := trajectories.Refused(err, o.Step); ok {
			return schemas.Manifest{}, fmt.Errorf("%w (%s)", refusal, o.Config.Run.Dir)
		}
		return schemas.Manifest{}, fmt.Errorf("rollout step %d of %s: %w", o.Step, o.Config.Run.Dir, err)
	}
	if o.DryRun {
		return schemas.Manifest{}, nil // nothing ran, nothing was committed
	}
	m, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		return schemas.Manifest{}, fmt.Errorf("rollout: the pipeline finished but %w", err)
	}
	return m, nil
}

// carried fills o.Carried under rollout.carry with the groups step
// o.Step-1 carried into o.Step (it must be committed: its manifest counts
// them), and clears what an earlier attempt at o.Step may have left in
// its own carry directory.
func carried(ctx context.Context, o *Options) error {
	c := o.Config
	if !c.Rollout.Carry {
		return nil
	}
	if !o.DryRun {
		if err := trajectories.ClearCarried(ctx, rundir.Carry(rundir.Step(c.Run.Dir, o.Step))); err != nil {
			return err
		}
	}
	if o.Step == 0 {
		return nil
	}
	prev := rundir.Step(c.Run.Dir, o.Step-1)
	m, err := schemas.ReadManifest(ctx, prev)
	if errors.Is(err, schemas.ErrNoManifest) {
		return fmt.Errorf("rollout: step %d reads the groups step %d carried into it (rollout.carry), but step %d is not committed (%s); roll step %d out first", o.Step, o.Step-1, o.Step-1, prev, o.Step-1)
	}
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	st, err := records.ReadStepStats(m.Meta)
	if err != nil {
		return fmt.Errorf("rollout: step %d's manifest: %w", o.Step-1, err)
	}
	if st.GroupsCarried == 0 {
		return nil
	}
	o.Carried, err = trajectories.ReadCarried(ctx, rundir.Carry(prev), st.GroupsCarried)
	return err
}
