//go:build cgo && !purego

package trainer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
)

// The data-parallel tests start real rank processes: the test binary
// re-executed (disttest.Launch), which TestMain sends to programDPSteps.
func TestMain(m *testing.M) {
	disttest.Dispatch(map[string]func() int{"dpsteps": programDPSteps, "dpbench": programDPBench})
	os.Exit(m.Run())
}

// dpCfg is the update the data-parallel tests take: two mini-batches of
// micro-batches of at most 24 tokens, so that every virtual shard packs
// several, and a learning rate that moves every parameter each step.
func dpCfg() RLConfig {
	cfg := RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 24, PPOEpochs: 1, MiniBatches: 2}
	if k, _ := strconv.Atoi(os.Getenv("AIPO_DP_MICRO_TOKENS")); k > 0 {
		cfg.MicroBatchTokens = k
	}
	cfg.Loss.KLCoef = 0
	if os.Getenv("AIPO_DP_KL") != "" {
		// A KL term against dpLearner's reference, strong enough to
		// move the update.
		cfg.Loss.KLCoef = 0.5
	}
	return cfg
}

// dpSamples is step k's batch: 24 trajectories of 2 to 12 response
// tokens with mixed sources and advantages, the same in every process.
func dpSamples(k int) []RLSample {
	r := rand.New(rand.NewPCG(uint64(k), 77))
	out := make([]RLSample, 24)
	for i := range out {
		s := RLSample{Sequence: Sequence{Prompt: []int32{1, int32(2 + r.IntN(18))}}, Advantage: float32(r.NormFloat64())}
		for range 2 + r.IntN(11) {
			s.Response = append(s.Response, int32(2+r.IntN(18)))
			s.Source = append(s.Source, []loss.Source{loss.Internal, loss.Internal, loss.External, loss.Untrained}[r.IntN(4)])
		}
		out[i] = s
	}
	return out
}

// dpLearner is the tiny policy every rank starts from, and its AdamW.
func dpLearner() (*Learner, error) {
	mc := tinyConfig(20)
	if k, _ := strconv.Atoi(os.Getenv("AIPO_DP_LAYERS")); k > 0 {
		mc.NumHiddenLayers = k
	}
	if os.Getenv("AIPO_DP_QWEN3") != "" {
		// A tiny Qwen3 (its q/k norm, tied head) with Qwen3's vocabulary.
		mc.ModelType, mc.HeadDim, mc.VocabSize = "qwen3", 8, 151936
	}
	m, err := model.New(mc, 5)
	if err != nil {
		return nil, err
	}
	// learner.precision bf16: the passes' products in bfloat16.
	m.SetComputeBF16(os.Getenv("AIPO_DP_BF16") != "")
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay, oc.GradClip = 1e-2, 0.1, 0.5
	opt, err := optim.New(oc)
	if err != nil {
		return nil, err
	}
	l := &Learner{Policy: m, Opt: opt}
	if os.Getenv("AIPO_DP_LORA") != "" {
		// A LoRA adapter of rank 4 on every projection, with dropout,
		// B drawn too (a new adapter's is zero); the KL term's
		// reference is then the base.
		if err := attachTestAdapter(m); err != nil {
			return nil, err
		}
		return l, nil
	}
	if os.Getenv("AIPO_DP_KL") != "" {
		// A frozen reference of other weights, scored as the policy is;
		// with bfloat16 products held in bfloat16, as backend Eval holds
		// it.
		if l.Ref, err = model.New(mc, 6); err != nil {
			return nil, err
		}
		l.Ref.SetComputeBF16(m.ComputesInBF16())
		if m.ComputesInBF16() && !l.Ref.HoldBF16Rounded() {
			return nil, errors.New("the reference was not held in bfloat16")
		}
	}
	return l, nil
}

// programDPSteps is one rank: it joins the group, optionally loads the
// parameters and optimiser state saved by another group
// (AIPO_DP_LOAD), takes steps AIPO_DP_FIRST.. of AIPO_DP_STEPS, and saves
// both (rank 0 writes, every rank gathers) to AIPO_DP_SAVE.
func programDPSteps() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
		return 1
	}
	ctx := context.Background()
	l, err := dpLearner()
	if err != nil {
		return fail(err)
	}
	// AIPO_DP_SINGLE: one process outside any group, whose RLStep makes it
	// the one rank of its own (Learner.EnableSingle), of SingleShards
	// shards, or of AIPO_DP_SINGLE's number when it is not 1.
	single := os.Getenv("AIPO_DP_SINGLE") != ""
	var comm collective.Comm
	if v, _ := strconv.Atoi(os.Getenv("AIPO_DP_SINGLE")); v > 1 {
		if err := l.EnableSingle(DPConfig{Shards: v}); err != nil {
			return fail(err)
		}
	}
	if !single {
		c, leave, err := joinGloo(ctx, collective.Options{RendezvousTimeout: 30 * time.Second, OpTimeout: 30 * time.Second})
		if err != nil {
			return fail(err)
		}
		defer leave()
		comm = c
		zero, _ := strconv.Atoi(os.Getenv("AIPO_DP_ZERO"))
		if p, _ := strconv.Atoi(os.Getenv("AIPO_DP_PIECE")); p > 0 {
			zero2Piece = p
		}
		shards := DefaultShards
		if os.Getenv("AIPO_DP_ONE_SHARD_A_RANK") != "" {
			shards = comm.Size()
		}
		keep, _ := strconv.ParseInt(os.Getenv("AIPO_DP_KEEP"), 10, 64)
		if err := l.EnableDataParallel(comm, DPConfig{Shards: shards, Zero: zero, KeepGathered: keep}); err != nil {
			return fail(err)
		}
	}
	if dir := os.Getenv("AIPO_DP_LOAD"); dir != "" {
		if err := loadParams(l, filepath.Join(dir, "params.bin")); err != nil {
			return fail(err)
		}
		if err := loadOptimizer(l, dir, os.Getenv("AIPO_DP_LOAD_PARTS") != ""); err != nil {
			return fail(err)
		}
	}
	first, _ := strconv.Atoi(os.Getenv("AIPO_DP_FIRST"))
	steps, _ := strconv.Atoi(os.Getenv("AIPO_DP_STEPS"))
	few, _ := strconv.Atoi(os.Getenv("AIPO_DP_FEW"))
	for k := first; k < steps; k++ {
		samples := dpSamples(k)
		if k+1 == few {
			// Three trajectories: most shards, and whole ranks, have none.
			samples = samples[:3]
		}
		var st RLStats
		if single {
			st, err = l.RLStep(dpCfg(), samples)
			comm = l.DP.Comm
		} else {
			st, err = l.RLStepDP(ctx, dpCfg(), samples)
		}
		if err != nil {
			return fail(fmt.Errorf("step %d: %w", k, err))
		}
		fmt.Printf("step %d: loss %.6f grad-norm %.6f tokens %d\n", k, st.Loss, st.GradNorm, st.Tokens)
		if os.Getenv("AIPO_DP_SYNC") != "" {
			// As a run between steps: the weights whole in the host
			// model (gathered at stage 3), sharded again by the next step.
			if err := l.SyncPolicy(); err != nil {
				return fail(err)
			}
		}
	}
	if dir := os.Getenv("AIPO_DP_SAVE"); l.DP.Zero == 2 && comm.Rank() == 0 && dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "overlapped"), []byte(strconv.FormatInt(l.DP.Overlapped, 10)), 0o644); err != nil {
			return fail(err)
		}
	}
	var opt bytes.Buffer
	if err := l.WriteOptimizerDP(ctx, &opt); err != nil {
		return fail(err)
	}
	var weights []float32
	if l.Policy.HasAdapter() {
		// What a LoRA run trains and saves: the adapter. The base is
		// what it was, in this rank's share of it at stage 3.
		weights = l.Policy.AdapterParamData()
		if err := checkBaseUnchanged(l); err != nil {
			return fail(err)
		}
	} else if weights, err = l.GatherPolicy(ctx); err != nil {
		return fail(err)
	}
	if dir := os.Getenv("AIPO_DP_MEMORY"); dir != "" && (l.DP.z3 != nil || l.DP.base != nil) {
		// What the rank held at its peak, and its share.
		if l.DP.z3 != nil {
			b, _ := json.Marshal(l.DP.z3.Memory())
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("memory-%d.json", comm.Rank())), b, 0o644); err != nil {
				return fail(err)
			}
			sent := []byte(strconv.FormatInt(l.DP.Sent, 10))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("sent-%d", comm.Rank())), sent, 0o644); err != nil {
				return fail(err)
			}
		}
		share, peak := l.DP.ReferenceMemory()
		if l.DP.base != nil {
			share, peak = l.DP.BaseMemory()
		}
		b, _ := json.Marshal([2]int64{share, peak})
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("reference-%d.json", comm.Rank())), b, 0o644); err != nil {
			return fail(err)
		}
	}
	dir := os.Getenv("AIPO_DP_SAVE")
	x := l.OptimizerIndex(partName)
	if dir != "" {
		// Every rank writes its part of the state as well (at stage 3
		// once the ranks laid the parts out); rank 0 the index.
		if err := l.PrepareOptimizerParts(ctx); err != nil {
			return fail(err)
		}
		var part bytes.Buffer
		if err := l.WriteOptimizerPart(&part); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, partName(comm.Rank()+1, comm.Size())), part.Bytes(), 0o644); err != nil {
			return fail(err)
		}
	}
	if dir != "" && comm.Rank() == 0 {
		idx, err := json.Marshal(x)
		if err != nil {
			return fail(err)
		}
		for name, b := range map[string][]byte{"params.bin": floatBytes(weights), "optimizer.bin": opt.Bytes(), "optimizer.index.json": idx} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return fail(err)
			}
		}
	}
	fmt.Println("done")
	return 0
}

func partName(i, n int) string { return fmt.Sprintf("optimizer-%d-of-%d.bin", i, n) }

// loadOptimizer restores l's share of the optimiser state saved in dir:
// from the ranks' parts (reading those that hold it) or from the gathered
// one-process file.
func loadOptimizer(l *Learner, dir string, parts bool) error {
	if !parts {
		f, err := os.Open(filepath.Join(dir, "optimizer.bin"))
		if err != nil {
			return err
		}
		defer f.Close()
		return l.ReadOptimizerDP(f)
	}
	b, err := os.ReadFile(filepath.Join(dir, "optimizer.index.json"))
	if err != nil {
		return err
	}
	x, err := optim.ParsePartIndex(b)
	if err != nil {
		return err
	}
	return l.ReadOptimizerParts(x, func(file string) (io.ReadCloser, error) { return os.Open(filepath.Join(dir, file)) })
}

// joinGloo forms the group of the launcher's environment and opens its
// Gloo communicator; leave closes both.
func joinGloo(ctx context.Context, opts collective.Options) (comm collective.Comm, leave func(), err error) {
	env, err := collective.EnvFromOS()
	if err != nil {
		return nil, nil, err
	}
	g, err := collective.Join(ctx, env, opts)
	if err != nil {
		return nil, nil, err
	}
	if comm, err = gloo.New(ctx, g); err != nil {
		g.Close()
		return nil, nil, err
	}
	return comm, func() { comm.Close(); g.Close() }, nil
}

// floatBytes is xs as little-endian float32.
func floatBytes(xs []float32) []byte {
	b := make([]byte, 0, 4*len(xs))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// loadParams replaces the policy's weights (this rank's share of them at
// stage 3) by those saved at path.
func loadParams(l *Learner, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b)%4 != 0 {
		return fmt.Errorf("%s is not float32s", path)
	}
	flat := make([]float32, len(b)/4)
	for i := range flat {
		flat[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return l.LoadPolicy(flat)
}

// dpRun runs size ranks from step first to steps (loading load, when set)
// and returns the directory they saved to.
func dpRun(t *testing.T, size, first, steps int, load string) string {
	t.Helper()
	return dpRunFrom(t, size, first, steps, load, false)
}

// dpRunFrom is dpRun, restoring the optimiser state from the saved ranks'
// parts when parts is set (else from the gathered file).
func dpRunFrom(t *testing.T, size, first, steps int, load string, parts bool, extra ...string) string {
	t.Helper()
	save := t.TempDir()
	fromParts := ""
	if parts {
		fromParts = "1"
	}
	rs := disttest.Launch(t, disttest.Spec{Program: "dpsteps", Size: size, Env: func(int) []string {
		return append([]string{"AIPO_DP_LOAD=" + load, "AIPO_DP_LOAD_PARTS=" + fromParts, "AIPO_DP_SAVE=" + save, "AIPO_DP_FIRST=" + strconv.Itoa(first), "AIPO_DP_STEPS=" + strconv.Itoa(steps)}, extra...)
	}})
	for _, e := range rs.Wait(2 * time.Minute) {
		if e.Code != 0 {
			t.Fatalf("%d ranks: rank %d exited %d:\n%s", size, e.Rank, e.Code, e.Output)
		}
	}
	t.Logf("%d ranks, steps %d..%d: %s", size, first, steps-1, strings.ReplaceAll(strings.TrimSpace(rs.Output(0)), "\n", "; "))
	return save
}

// joinSavedParts is the digest (as digest's) of the one-process state that
// the ranks' parts saved in dir join to.
func joinSavedParts(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "optimizer.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := optim.ParsePartIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := optim.JoinParts(h, x, func(file string) (io.ReadCloser, error) { return os.Open(filepath.Join(dir, file)) }); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// digest is the sha256 of a saved file.
func digest(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// maxAbsDiff is the largest difference between two saved parameter files.
func maxAbsDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(a, "params.bin"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, "params.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(x) != len(y) {
		t.Fatalf("parameter files of %d and %d bytes", len(x), len(y))
	}
	worst := 0.0
	for i := 0; i < len(x); i += 4 {
		p := float64(math.Float32frombits(binary.LittleEndian.Uint32(x[i:])))
		q := float64(math.Float32frombits(binary.LittleEndian.Uint32(y[i:])))
		worst = max(worst, math.Abs(p-q))
	}
	return worst
}

// dpTol bounds how far parameters may be apart after 3 steps when the
// same gradients were summed in another grouping (3 ranks against 1, or
// one rank against RLStep, which also packs micro-batches differently):
// the sums differ in their last float32 bits, and AdamW's first steps
// divide each gradient by the root of its own square, so a parameter
// whose gradient is near 0 can move by a visibly different fraction of
// lr. 1e-4 is a hundredth of one step's move (lr 1e-2) and far above the
// measured 2e-6 to 2e-5.
const dpTol = 1e-4

// ZeRO stage 2 on the CPU (each unit's gradient exchanged as the backward
// pass ends it, no whole gradient buffer: zero3's schedule with the
// weights whole) gives stage 1's bits at 1, 2 and 4 ranks, and at 3 ranks
// stage 1's at 3 ranks (both group the shards 3-3-2), on dpCfg's shards,
// which pack into one micro-batch but for a few. The second of the 3
// steps trains on 3 trajectories, so that most shards are empty and most
// ranks run shadow passes. Rank 0 reports that every unit's exchange but
// the embedding's began during its passes (3 of the tiny model's 4 a
// pass).
func TestZeroStage2IsStage1(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	few := "AIPO_DP_FEW=2"
	one := dpRunFrom(t, 1, 0, 3, "", false, few)
	want := [2]string{digest(t, one, "params.bin"), digest(t, one, "optimizer.bin")}
	for _, n := range []int{1, 2, 4, 3} {
		if n == 3 {
			three := dpRunFrom(t, 3, 0, 3, "", false, few)
			want = [2]string{digest(t, three, "params.bin"), digest(t, three, "optimizer.bin")}
		}
		dir := dpRunFrom(t, n, 0, 3, "", false, few, "AIPO_DP_ZERO=2")
		if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
			t.Errorf("%d ranks at stage 2: parameters and optimiser state %v, stage 1 %v", n, got, want)
		}
		b, err := os.ReadFile(filepath.Join(dir, "overlapped"))
		k, _ := strconv.Atoi(string(b))
		if err != nil || k == 0 || k%3 != 0 {
			t.Errorf("%d ranks at stage 2: rank 0 reduced %q units during its passes (%v), want a multiple of 3 above 0", n, b, err)
		}
	}
}

// Without the fixed virtual shards (learner.deterministic: false), each
// rank packs its share of a mini-batch as one shard: at 2, 3 and 4 ranks,
// at both ZeRO stages, the update agrees with the deterministic one's
// within dpTol (the sums grouped differently, the micro-batches packed
// otherwise), and so do the two stages (a shard's several micro-batches
// added otherwise).
func TestDataParallelOneShardARank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	one := dpRun(t, 1, 0, 3, "")
	for _, n := range []int{2, 3, 4} {
		a := dpRunFrom(t, n, 0, 3, "", false, "AIPO_DP_ONE_SHARD_A_RANK=1")
		b := dpRunFrom(t, n, 0, 3, "", false, "AIPO_DP_ONE_SHARD_A_RANK=1", "AIPO_DP_ZERO=2")
		if d := maxAbsDiff(t, one, a); d > dpTol {
			t.Errorf("%d ranks, one shard each: parameters %.3g from the deterministic update's, more than %g", n, d, dpTol)
		} else {
			t.Logf("%d ranks, one shard each: parameters within %.3g of the deterministic update's", n, d)
		}
		// Stage 2 adds a shard's micro-batches round by round where stage
		// 1 accumulates them in the backward pass: within float32
		// rounding of each other.
		if d := maxAbsDiff(t, a, b); d > dpTol {
			t.Errorf("%d ranks, one shard each: stage 2 %.3g from stage 1, more than %g", n, d, dpTol)
		} else {
			t.Logf("%d ranks, one shard each: stage 2 within %.3g of stage 1", n, d)
		}
	}
}

// A data-parallel update at 1, 2, 4 and 8 ranks gives the same parameters
// and optimiser state, bit for bit, over 3 steps of two mini-batches; at 3
// ranks they agree within dpTol (absolute). Saved by 4 ranks after 2 steps, the
// state resumes at 2 and 1 ranks to the same bits as the uninterrupted
// run, and at 3 within dpTol. A learner outside any group (RLStep, one
// process) takes the same step: the same bits.
func TestDataParallelStepIsTheSameAtEverySize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	one := dpRun(t, 1, 0, 3, "")
	want := [2]string{digest(t, one, "params.bin"), digest(t, one, "optimizer.bin")}
	for _, n := range []int{2, 4, 8} {
		dir := dpRun(t, n, 0, 3, "")
		if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
			t.Errorf("%d ranks: parameters and optimiser state %v, 1 rank %v", n, got, want)
		}
	}
	three := dpRun(t, 3, 0, 3, "")
	if d := maxAbsDiff(t, one, three); d > dpTol {
		t.Errorf("3 ranks: parameters differ from 1 rank's by up to %.3g (tolerance %g)", d, dpTol)
	} else {
		t.Logf("3 ranks against 1: parameters within %.3g", d)
	}

	// Saved by 4 ranks, as the gathered file and as the ranks' own parts,
	// which join to the same bytes; resumed from either.
	saved := dpRun(t, 4, 0, 2, "")
	joined := joinSavedParts(t, saved)
	if g := digest(t, saved, "optimizer.bin"); joined != g {
		t.Errorf("the 4 ranks' parts join to %s, the gathered state is %s", joined, g)
	}
	for _, parts := range []bool{false, true} {
		for _, n := range []int{2, 1} {
			dir := dpRunFrom(t, n, 2, 3, saved, parts)
			if got := [2]string{digest(t, dir, "params.bin"), digest(t, dir, "optimizer.bin")}; got != want {
				t.Errorf("saved at 4 ranks, resumed at %d (from the parts: %v): %v, uninterrupted %v", n, parts, got, want)
			}
		}
		if d := maxAbsDiff(t, one, dpRunFrom(t, 3, 2, 3, saved, parts)); d > dpTol {
			t.Errorf("saved at 4 ranks, resumed at 3 (from the parts: %v): parameters differ by up to %.3g", parts, d)
		}
	}

	// The same update as one process's RLStep of the groups' shards,
	// outside any group: one step function. (In a process of the ranks'
	// threads: the CPU's products are the same bits at one thread count,
	// not across counts.)
	plain := dpRunFrom(t, 1, 0, 3, "", false, "AIPO_DP_SINGLE="+strconv.Itoa(DefaultShards))
	if got := [2]string{digest(t, plain, "params.bin"), digest(t, plain, "optimizer.bin")}; got != want {
		t.Errorf("one process's RLStep of %d shards: parameters and optimiser state %v, a group's %v (parameters apart by up to %.3g)", DefaultShards, got, want, maxAbsDiff(t, one, plain))
	}
	// RLStep's default, one shard summed in place: the mini-batch packed
	// whole, so the products and sums are grouped otherwise, within the
	// tolerance of 3 ranks'.
	whole := dpRunFrom(t, 1, 0, 3, "", false, "AIPO_DP_SINGLE=1")
	if d := maxAbsDiff(t, one, whole); d > dpTol || d == 0 {
		t.Errorf("one process's RLStep of %d shard: parameters %.3g from a group's of %d shards (want 0 < d <= %g)", SingleShards, d, DefaultShards, dpTol)
	} else {
		t.Logf("one process's RLStep of %d shard against a group's of %d: parameters within %.3g", SingleShards, DefaultShards, d)
	}
}

// Optimiser state of another model is refused by name.
func TestReadOptimizerDPRefusesAnotherModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	dir := dpRun(t, 1, 0, 1, "")
	m, err := model.New(tinyConfig(24), 5)
	if err != nil {
		t.Fatal(err)
	}
	l := &Learner{Policy: m, Opt: mustAdamW(t)}
	ctx := context.Background()
	g, err := collective.Join(ctx, collective.Env{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: disttest.FreePort(t)}, collective.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	comm, err := gloo.New(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	if err := l.EnableDataParallel(comm, DPConfig{Shards: DefaultShards}); err != nil {
		t.Fatal(err)
	}
	for _, parts := range []bool{false, true} {
		err = loadOptimizer(l, dir, parts)
		if err == nil || !strings.Contains(err.Error(), "of 640 values, the policy's parameter 0 is") || !strings.Contains(err.Error(), "another model's") {
			t.Errorf("a 20-token vocabulary's state into a 24-token model (from the parts: %v): %v", parts, err)
		}
	}
}

func mustAdamW(t *testing.T) *optim.AdamW {
	o, err := optim.New(optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return o
}
