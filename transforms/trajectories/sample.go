package trajectories

import (
	"context"
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
	G := f.Spec.GroupSize
	g := Group{Prompt: p, Trajectories: make([]schemas.Trajectory, G), PolicyTexts: make([]string, G), Errors: make([]string, G)}
	ids, err := f.promptTokens(ctx, p)
	if err != nil {
		for j := range G {
			g.Trajectories[j] = f.failedTrajectory(p, j, ids)
			g.Errors[j] = err.Error()
		}
		return g
	}
	var n groupCounts
	var wg sync.WaitGroup
	firstGuide := G
	if f.Spec.Guidance.On() {
		firstGuide = G - f.Spec.Guidance.Traces
	}
	for j := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case f.w.slots <- struct{}{}:
			case <-ctx.Done():
				fail(ctx.Err())
				return
			}
			defer func() { <-f.w.slots }()
			if j >= firstGuide {
				if done := f.guide(ctx, p, j, ids, &g, &n, fail); done {
					return
				}
			}
			f.sample(ctx, p, j, ids, &g, &n, fail)
		}()
	}
	wg.Wait()
	g.PolicyCalls, g.PolicyRetries, g.PolicyInterrupted = n.calls.Load(), n.retries.Load(), n.interrupted.Load()
	g.Guided, g.GuideMissing = n.guided.Load(), n.missing.Load()
	g.versionGuides(firstGuide)
	return g
}

// groupCounts are a group's counts, added to by its samples at once.
type groupCounts struct {
	calls, retries, interrupted, guided, missing atomic.Int64
}

// guide makes sample j of g a guidance trace, when the prompt has one;
// done reports that nothing is left to do for j (the trace is in, or the
// step failed). Without a trace, j is sampled from the policy instead.
func (f *sampleFn) guide(ctx context.Context, p schemas.Prompt, j int, ids []int32, g *Group, n *groupCounts, fail func(error)) (done bool) {
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
// interaction protocol, and its policy-written text; a trajectory that
// failed keeps its error beside it.
func (f *sampleFn) sample(ctx context.Context, p schemas.Prompt, j int, ids []int32, g *Group, n *groupCounts, fail func(error)) {
	task := interact.Task{
		Run: f.Spec.Run, Step: f.Spec.Step, RunSeed: f.Spec.Seed,
		PromptID: p.ID, Sample: j, DataSource: p.DataSource, Prompt: ids, Problem: p.Problem,
	}
	out, err := f.w.protocol.Run(ctx, task)
	if err != nil {
		fail(err)
		return
	}
	n.calls.Add(int64(out.PolicyCalls))
	n.interrupted.Add(int64(out.Interrupted))
	n.retries.Add(int64(out.PolicyRetries))
	g.Trajectories[j] = out.Trajectory
	if out.Err != nil {
		g.Errors[j] = out.Err.Error()
		return
	}
	text, err := f.policyText(ctx, out.Trajectory)
	if err != nil {
		if ctx.Err() != nil {
			fail(ctx.Err())
			return
		}
		g.Trajectories[j].FinishReason = schemas.FinishError
		g.Errors[j] = err.Error()
		return
	}
	g.PolicyTexts[j] = text
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
func (f *sampleFn) policyText(ctx context.Context, t schemas.Trajectory) (string, error) {
	own := make([]int32, 0, len(t.ResponseIDs))
	for i, id := range t.ResponseIDs {
		if t.TokenSource[i] == schemas.SourcePolicy {
			own = append(own, id)
		}
	}
	if len(own) == 0 {
		return "", nil
	}
	text, err := f.w.client.Detokenize(ctx, own)
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
