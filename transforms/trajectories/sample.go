package trajectories

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// Group is one prompt's G trajectories on their way to the shards.
type Group struct {
	Prompt       schemas.Prompt
	Trajectories []schemas.Trajectory
	// PolicyTexts[i] is what the policy itself wrote in trajectory i (the
	// inserted tokens left out): the text the verifier judges.
	PolicyTexts []string
	// Errors[i] says why trajectory i failed ("" when it did not).
	Errors []string
	// PolicyCalls and PolicyRetries sum the trajectories' policy calls and
	// retried attempts.
	PolicyCalls, PolicyRetries int64
	// PolicyInterrupted sums the policy calls stopped at a weight push.
	PolicyInterrupted int64
	// Guided counts the samples that are guidance traces; GuideMissing
	// those meant to be that were sampled from the policy instead (the
	// prompt had no solution, or the teacher failed).
	Guided, GuideMissing int64
	// Carried, when not empty, is the group carried into the next step
	// (rollout.carry): a CarriedGroup in JSON, written under the step's
	// carry directory instead of being scored and trained here.
	Carried string
	// CarriedSteps is how many steps' batches the group was carried past
	// before this one (0: drawn by this step).
	CarriedSteps int64
	// AtCarryBound says the group was carried Carry.MaxSteps times and
	// finished in this step whatever the pushes did.
	AtCarryBound bool
}

// Sample runs G trajectories for every prompt of every batch.
//
//	PCollection<KV<int, []schemas.Prompt>> (from Batch) -> PCollection<Group>
func Sample(s beam.Scope, spec Spec, batches beam.PCollection) beam.PCollection {
	s = s.Scope("rollout.Sample")
	if err := spec.Validate(); err != nil {
		panic(err)
	}
	return beam.ParDo(s, &sampleFn{Spec: spec}, batches)
}

// sampleFn runs the trajectories of batches of prompts concurrently, at
// most Spec.MaxInFlight at a time per worker process. Work is not bound to
// the element that brought it: ProcessElement starts a batch's
// trajectories and emits the groups that have finished so far (of this or
// earlier elements of the bundle); FinishBundle waits for the rest. So the
// in-flight bound stays filled across the elements of a bundle.
type sampleFn struct {
	Spec Spec `json:"spec"`

	w                         *worker
	trajectories, failed, ret beam.Counter
	b                         *bundle
}

// bundle is the work of the current bundle.
type bundle struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	ready  []Group
	logged int
}

// Setup opens (or shares) the worker's policy client and collaborators.
func (f *sampleFn) Setup(ctx context.Context) error {
	w, err := acquireWorker(ctx, f.Spec)
	if err != nil {
		return err
	}
	f.w = w
	f.trajectories = beam.NewCounter("aipo.rollout", "trajectories")
	f.failed = beam.NewCounter("aipo.rollout", "failed_trajectories")
	f.ret = beam.NewCounter("aipo.rollout", "policy_retries")
	return nil
}

// Teardown stops unfinished work and releases the worker; the last user
// closes the client and the collaborators.
func (f *sampleFn) Teardown() error {
	f.abandon()
	if f.w == nil {
		return nil
	}
	f.w = nil
	return releaseWorker(f.Spec)
}

// StartBundle drops the work of a bundle that failed.
func (f *sampleFn) StartBundle(_ context.Context, _ func(Group)) {
	f.abandon()
	ctx, cancel := context.WithCancelCause(context.Background())
	f.b = &bundle{ctx: ctx, cancel: cancel}
}

func (f *sampleFn) abandon() {
	if f.b != nil {
		f.b.cancel(errors.New("rollout: bundle abandoned"))
		f.b.wg.Wait()
		f.b = nil
	}
}

// ProcessElement starts every trajectory of the batch and emits the groups
// finished so far.
func (f *sampleFn) ProcessElement(ctx context.Context, _ int, iter func(*schemas.Prompt) bool, emit func(Group)) error {
	if f.b == nil {
		f.StartBundle(ctx, emit)
	}
	b := f.b
	var ps []schemas.Prompt
	var p schemas.Prompt
	for iter(&p) {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	for _, p := range ps {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			g := f.runPrompt(b.ctx, p, b.cancel)
			b.mu.Lock()
			b.ready = append(b.ready, g)
			b.mu.Unlock()
		}()
	}
	return f.drain(ctx, emit)
}

// FinishBundle waits for the bundle's remaining trajectories and emits
// their groups.
func (f *sampleFn) FinishBundle(ctx context.Context, emit func(Group)) error {
	if f.b == nil {
		return nil
	}
	f.b.wg.Wait()
	err := f.drain(ctx, emit)
	f.b.cancel(nil)
	f.b = nil
	return err
}

// drain emits the finished groups, or reports why the bundle failed.
func (f *sampleFn) drain(ctx context.Context, emit func(Group)) error {
	b := f.b
	if b.ctx.Err() != nil {
		return fmt.Errorf("rollout: %w", context.Cause(b.ctx))
	}
	b.mu.Lock()
	ready := b.ready
	b.ready = nil
	b.mu.Unlock()
	for _, g := range ready {
		var failed int64
		for j, e := range g.Errors {
			if e == "" {
				continue
			}
			failed++
			if b.logged < 5 {
				b.logged++
				log.Warnf(ctx, "rollout: prompt %s sample %d failed: %s", g.Prompt.ID, j, e)
			}
		}
		f.trajectories.Inc(ctx, int64(len(g.Trajectories)))
		f.failed.Inc(ctx, failed)
		f.ret.Inc(ctx, g.PolicyRetries)
		emit(g)
	}
	return nil
}

// runPrompt runs the G trajectories of one prompt. It calls fail when ctx
// ends under it.
func (f *sampleFn) runPrompt(ctx context.Context, p schemas.Prompt, fail func(error)) Group {
	ids, err := f.promptTokens(ctx, p)
	if err != nil {
		G := f.Spec.GroupSize
		g := Group{Prompt: p, Trajectories: make([]schemas.Trajectory, G), PolicyTexts: make([]string, G), Errors: make([]string, G)}
		for j := range G {
			g.Trajectories[j] = f.failedTrajectory(p, j, ids)
			g.Errors[j] = err.Error()
		}
		return g
	}
	return runGroup(ctx, f.w, f.Spec, p, ids, nil, fail)
}

// runGroup runs the G trajectories of prompt p (encoded as ids), drawn by
// spec's step, or continues those of from, a group carried into it. Under
// rollout.carry a sample may stop at an interruption, or not start once
// the step's batch has closed: the group is then carried whole (Carried).
// It calls fail when ctx ends under it.
func runGroup(ctx context.Context, w *worker, spec Spec, p schemas.Prompt, ids []int32, from *CarriedGroup, fail func(error)) Group {
	G := spec.GroupSize
	g := Group{Prompt: p, Trajectories: make([]schemas.Trajectory, G), PolicyTexts: make([]string, G), Errors: make([]string, G)}
	step := spec.Step
	var n groupCounts
	if from != nil {
		step, g.CarriedSteps = from.Step, from.Carries
		n.calls.Store(from.PolicyCalls)
		n.retries.Store(from.PolicyRetries)
		n.interrupted.Store(from.PolicyInterrupted)
		n.guided.Store(from.Guided)
		n.missing.Store(from.GuideMissing)
	}
	gate := carryGateOf(spec.Carry)
	// stops is the gate that may stop the group's samples: none for a
	// group carried as often as rollout.carry_max_steps allows, which
	// finishes here (counted towards the batch all the same).
	stops := gate
	if from != nil && spec.Carry.MaxSteps > 0 && from.Carries >= spec.Carry.MaxSteps {
		stops, g.AtCarryBound = nil, true
	}
	left := make([]*CarriedSample, G) // the samples carried on
	var wg sync.WaitGroup
	firstGuide := G
	if spec.Guidance.On() {
		firstGuide = G - spec.Guidance.Traces
	}
	for j := range G {
		var resume *interact.Resume
		if from != nil {
			switch cs := from.Samples[j]; cs.State {
			case SampleDone:
				g.Trajectories[j], g.PolicyTexts[j], g.Errors[j] = *cs.Trajectory, cs.PolicyText, cs.Error
				continue
			case SampleStopped:
				resume = cs.Resume
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case w.slots <- struct{}{}:
			case <-ctx.Done():
				fail(ctx.Err())
				return
			}
			defer func() { <-w.slots }()
			if stops.closed() {
				// The batch closed before the sample started: it starts
				// in the next step, as it would have here.
				left[j] = &CarriedSample{State: SampleUnstarted}
				if resume != nil {
					left[j] = &CarriedSample{State: SampleStopped, Resume: resume}
				}
				return
			}
			if j >= firstGuide && resume == nil {
				if done := guide(ctx, w, spec, step, p, j, ids, &g, &n, fail); done {
					return
				}
			}
			if r := sample(ctx, w, spec, step, p, j, ids, resume, stops, &g, &n, fail); r != nil {
				left[j] = &CarriedSample{State: SampleStopped, Resume: r}
			}
		}()
	}
	wg.Wait()
	g.PolicyCalls, g.PolicyRetries, g.PolicyInterrupted = n.calls.Load(), n.retries.Load(), n.interrupted.Load()
	g.Guided, g.GuideMissing = n.guided.Load(), n.missing.Load()
	carried := false
	for _, l := range left {
		carried = carried || l != nil
	}
	if !carried {
		g.versionGuides(firstGuide)
		if from != nil {
			// Trained in this step: its step column is this step's (the
			// shards' step column is their directory's), and its seeds
			// stayed those of the step that drew it (from.Step).
			for j := range g.Trajectories {
				g.Trajectories[j].Step = spec.Step
			}
		}
		gate.finished()
		return g
	}
	if ctx.Err() != nil {
		return g // the step fails (fail was called)
	}
	cg := CarriedGroup{Format: CarriedFormat, Prompt: p, PromptIDs: ids, Step: step, Carries: g.CarriedSteps + 1,
		PolicyCalls: g.PolicyCalls, PolicyRetries: g.PolicyRetries, PolicyInterrupted: g.PolicyInterrupted,
		Guided: g.Guided, GuideMissing: g.GuideMissing, Samples: make([]CarriedSample, G)}
	for j := range G {
		if left[j] != nil {
			cg.Samples[j] = *left[j]
			continue
		}
		tr := g.Trajectories[j]
		cg.Samples[j] = CarriedSample{State: SampleDone, Trajectory: &tr, PolicyText: g.PolicyTexts[j], Error: g.Errors[j]}
	}
	b, err := json.Marshal(cg)
	if err != nil {
		fail(fmt.Errorf("rollout: carry prompt %s: %w", p.ID, err))
		return g
	}
	g.Carried = string(b)
	return g
}

// groupCounts are a group's counts, added to by its samples at once.
type groupCounts struct {
	calls, retries, interrupted, guided, missing atomic.Int64
}

// guide makes sample j of g a guidance trace, when the prompt has one;
// done reports that nothing is left to do for j (the trace is in, or the
// step failed). Without a trace, j is sampled from the policy instead.
func guide(ctx context.Context, w *worker, spec Spec, step int64, p schemas.Prompt, j int, ids []int32, g *Group, n *groupCounts, fail func(error)) (done bool) {
	f := &sampleFn{Spec: spec, w: w}
	f.Spec.Step = step
	text, err := f.guideText(ctx, p, j)
	if err != nil && ctx.Err() != nil {
		fail(ctx.Err())
		return true
	}
	if text != "" {
		tr, kept, err := f.guideTrajectory(ctx, p, j, ids, text)
		if err == nil {
			g.Trajectories[j], g.PolicyTexts[j] = tr, kept
			n.guided.Add(1)
			return true
		}
		if ctx.Err() != nil {
			fail(ctx.Err())
			return true
		}
	}
	n.missing.Add(1) // sampled from the policy instead
	return false
}

// sample fills sample j of g with the policy's trajectory through the
// interaction protocol (continuing resume, when set), and its
// policy-written text; a trajectory that failed keeps its error beside
// it. Under rollout.carry a sample that stops at an interruption returns
// its state instead, and leaves g and n as they were.
func sample(ctx context.Context, w *worker, spec Spec, step int64, p schemas.Prompt, j int, ids []int32, resume *interact.Resume, gate *carryGate, g *Group, n *groupCounts, fail func(error)) *interact.Resume {
	task := interact.Task{
		Run: spec.Run, Step: step, RunSeed: spec.Seed,
		PromptID: p.ID, Sample: j, DataSource: p.DataSource, Prompt: ids, Problem: p.Problem,
		Resume: resume,
	}
	if gate != nil {
		task.Carry, task.Closed = gate.decide, gate.closed
	}
	out, err := w.protocol.Run(ctx, task)
	if err != nil {
		fail(err)
		return nil
	}
	if out.Carried != nil {
		return out.Carried
	}
	n.calls.Add(int64(out.PolicyCalls))
	n.interrupted.Add(int64(out.Interrupted))
	n.retries.Add(int64(out.PolicyRetries))
	g.Trajectories[j] = out.Trajectory
	if out.Err != nil {
		g.Errors[j] = out.Err.Error()
		return nil
	}
	text, err := policyText(ctx, w, out.Trajectory)
	if err != nil {
		if ctx.Err() != nil {
			fail(ctx.Err())
			return nil
		}
		g.Trajectories[j].FinishReason = schemas.FinishError
		g.Errors[j] = err.Error()
		return nil
	}
	g.PolicyTexts[j] = text
	return nil
}

// versionGuides gives each guidance trace of g (samples from firstGuide
// on) the version of the policy that sampled the group's other samples.
func (g *Group) versionGuides(firstGuide int) {
	for j := firstGuide; j < len(g.Trajectories) && g.Guided > 0; j++ {
		if g.Trajectories[j].TokenSource != nil && len(g.Trajectories[j].TokenSource) > 0 && g.Trajectories[j].TokenSource[0] == schemas.SourceGuide {
			for i := range firstGuide {
				if g.Trajectories[i].FinishReason != schemas.FinishError {
					g.Trajectories[j].PolicyVersion = g.Trajectories[i].PolicyVersion
					break
				}
			}
		}
	}
}

// promptTokens renders and encodes a prompt, trying the tokenizer up to
// three times. The template's text is encoded with special-token parsing
// on (its chat markers are meant); the prompt's fields must never become
// special tokens. When the fields' text encodes the same either way (the
// usual case), the whole text is encoded at once, which gives exactly the
// tokens of the rendered text; otherwise (a problem holding "<|im_start|>",
// say) each stretch is encoded on its own, the fields with special-token
// parsing off.
func (f *sampleFn) promptTokens(ctx context.Context, p schemas.Prompt) ([]int32, error) {
	segs, err := f.w.render.Segments(p)
	if err != nil {
		return nil, err
	}
	tokenize := func(text string, special bool) ([]int32, error) {
		for attempt := 0; ; attempt++ {
			ids, err := f.w.client.Tokenize(ctx, text, special)
			if err == nil {
				return ids, nil
			}
			if attempt == 2 || ctx.Err() != nil {
				return nil, fmt.Errorf("tokenize prompt %s: %w", p.ID, err)
			}
		}
	}
	var whole, data []string
	for _, s := range segs {
		whole = append(whole, s.Text)
		if s.Data {
			data = append(data, s.Text)
		}
	}
	// Special tokens hold no line breaks, so none spans two joined fields.
	fields := strings.Join(data, "\n")
	plain := true
	if fields != "" {
		on, err := tokenize(fields, true)
		if err != nil {
			return nil, err
		}
		off, err := tokenize(fields, false)
		if err != nil {
			return nil, err
		}
		plain = slices.Equal(on, off)
	}
	if plain {
		return tokenize(strings.Join(whole, ""), true)
	}
	var ids []int32
	for _, s := range segs {
		part, err := tokenize(s.Text, !s.Data)
		if err != nil {
			return nil, err
		}
		ids = append(ids, part...)
	}
	return ids, nil
}

// policyText decodes the tokens the policy sampled, in order, leaving out
// every inserted token.
func policyText(ctx context.Context, w *worker, t schemas.Trajectory) (string, error) {
	own := make([]int32, 0, len(t.ResponseIDs))
	for i, id := range t.ResponseIDs {
		if t.TokenSource[i] == schemas.SourcePolicy {
			own = append(own, id)
		}
	}
	if len(own) == 0 {
		return "", nil
	}
	text, err := w.client.Detokenize(ctx, own)
	if err != nil {
		return "", fmt.Errorf("detokenize the policy's tokens: %w", err)
	}
	return text, nil
}

// failedTrajectory is sample j of a prompt that could not be run at all.
func (f *sampleFn) failedTrajectory(p schemas.Prompt, j int, prompt []int32) schemas.Trajectory {
	if prompt == nil {
		prompt = []int32{}
	}
	return schemas.Trajectory{
		SchemaVersion: schemas.SchemaVersion, Run: f.Spec.Run, Step: f.Spec.Step,
		PolicyVersion: f.w.protocol.Info().PolicyVersion, PromptID: p.ID, SampleIndex: int32(j),
		DataSource: p.DataSource, PromptIDs: prompt, ResponseIDs: []int32{}, TokenSource: []int8{},
		BehaviorLogProbs: []float32{}, FinishReason: schemas.FinishError,
	}
}
