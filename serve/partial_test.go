package serve

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/policy/grpcclient"
)

// TestPartialRolloutAcrossReload runs trajectories against aipo serve with
// --interrupt-on-reload (engine.Config.InterruptOnReload) over gRPC and
// HTTP, and pushes new weights while they generate. The calls in flight
// stop with finish reason abort; the rollout keeps their tokens and
// continues each from its prompt plus those tokens, by token ids, on the
// new weights. Every trajectory still runs to its full budget (none is
// lost), some hold tokens of two versions, and each token's recorded
// behaviour log-prob is what the weights of its recorded version give it
// (scored by the learner's forward pass over the whole sequence).
func TestPartialRolloutAcrossReload(t *testing.T) {
	run := t.TempDir()
	models := map[int64]*model.Model{3: partialModel(t, 5)}
	first := rundir.Checkpoint(run, 3)
	saveCheckpoint(t, first, models[3], 3)
	r := start(t, Options{Checkpoint: first, Engine: engine.Config{EOS: []int32{}, InterruptOnReload: true}})
	ctx := ctxT(t, 2*time.Minute)
	uris := []string{"grpc://" + r.grpcAddr, "http://" + r.httpAddr + "/v1?model=tiny"}
	reloader := openClient(t, uris[0]).(*grpcclient.Client)

	const budget, samples, attempts = 100, 8, 32
	prompt := []int32{257, 40, 41, 42}
	mixed, interrupted := 0, 0
	for a := range attempts {
		v := int64(4 + a)
		models[v] = partialModel(t, uint64(50+a))
		dir := rundir.Checkpoint(run, v)
		saveCheckpoint(t, dir, models[v], v)

		outs := make([]interact.Outcome, samples)
		errs := make([]error, samples)
		var wg sync.WaitGroup
		before := r.srv.Engine().Stats().Generated
		for j := range samples {
			c := openClient(t, uris[j%2])
			cfg := interact.Default()
			cfg.Unanswered, cfg.MaxResponseTokens = true, budget
			p, err := interact.New(ctx, c, collab.Set{}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[j], errs[j] = p.Run(ctx, interact.Task{Run: "partial", Step: int64(a), PromptID: fmt.Sprint("p", a), Sample: j, Prompt: prompt})
			}()
		}
		// Push the new weights once the samples are generating.
		waitUntil(t, ctx, "generation to start", func() bool { return r.srv.Engine().Stats().Generated >= before+samples })
		if got, err := reloader.Reload(ctx, dir); err != nil || got != v {
			t.Fatalf("Reload to %s = %d, %v", dir, got, err)
		}
		wg.Wait()
		for j, o := range outs {
			if errs[j] != nil || o.Err != nil {
				t.Fatalf("attempt %d sample %d: %v %v", a, j, errs[j], o.Err)
			}
			tr := o.Trajectory
			if err := tr.Validate(); err != nil {
				t.Fatalf("attempt %d sample %d: %v", a, j, err)
			}
			if len(tr.ResponseIDs) != budget || tr.FinishReason != sampling.FinishLength {
				t.Fatalf("attempt %d sample %d: %d tokens, finish %q; want the full budget %d, finish length (nothing lost to the interruption)", a, j, len(tr.ResponseIDs), tr.FinishReason, budget)
			}
			interrupted += o.Interrupted
			if checkVersionedLogProbs(t, fmt.Sprintf("attempt %d sample %d", a, j), tr, models, v-1, v) {
				mixed++
			}
		}
		// A sample can also mix versions without an interruption (its
		// next call starts after the reload); go on until a reload has
		// stopped a call in flight too.
		if mixed > 0 && interrupted > 0 {
			break
		}
	}
	t.Logf("%d interrupted calls, %d trajectories with tokens of two versions", interrupted, mixed)
	if mixed == 0 || interrupted == 0 {
		t.Fatalf("no generation was interrupted by %d reloads (interrupted calls %d): the weight push did not stop the calls in flight", attempts, interrupted)
	}
}

// partialModel is testModel widened (256, 4 layers): generating the
// samples' 100 tokens takes many times as long as loading its checkpoint,
// so that a reload lands while they generate. With testModel's width a
// whole batch finished in about the time a reload takes, and one run in
// three saw no interruption.
func partialModel(t testing.TB, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{ModelType: "qwen2", HiddenSize: 256, IntermediateSize: 768, NumHiddenLayers: 4,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkVersionedLogProbs checks that tr's tokens come from versions old
// and new (old first) and that each token's behaviour log-prob is the
// log-prob its version's weights give it after the prompt and the tokens
// before it; it reports whether tr holds both versions.
func checkVersionedLogProbs(t *testing.T, what string, tr schemas.Trajectory, models map[int64]*model.Model, old, new int64) bool {
	t.Helper()
	seq := append(append([]int32(nil), tr.PromptIDs...), tr.ResponseIDs...)
	scored := map[int64][]float32{}
	prev := old
	for i, v := range tr.TokenVersions() {
		if v != old && v != new || v < prev {
			t.Fatalf("%s: token %d has version %d after version %d; want version %d, then %d", what, i, v, prev, old, new)
		}
		prev = v
		lp, ok := scored[v]
		if !ok {
			all, _, err := models[v].Score(model.Batch{Tokens: seq})
			if err != nil {
				t.Fatal(err)
			}
			lp = all[len(tr.PromptIDs)-1 : len(seq)-1]
			scored[v] = lp
		}
		// The engine's incremental decoding against one forward pass
		// over the whole sequence, in float32: as engine.checkLogProbs.
		if d := math.Abs(float64(lp[i] - tr.BehaviorLogProbs[i])); d > 5e-4 {
			t.Fatalf("%s: token %d (version %d) recorded log-prob %g, version %d's weights give %g", what, i, v, tr.BehaviorLogProbs[i], v, lp[i])
		}
	}
	return tr.TokenVersion(0) != tr.TokenVersion(len(tr.ResponseIDs)-1)
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
