package cuda

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
)

var (
	peakLine  = regexp.MustCompile(`rank (\d+) device peak (\d+)`)
	startLine = regexp.MustCompile(`rank (\d+) start-up peak (\d+)`)
)

// TestDeviceZero3 runs ZeRO stage 3 on the devices (backend.DeviceSharded:
// the passes' model sharded, its units gathered and its gradients reduced
// over the stand-in NCCL, AdamW on each rank's elements on the device) on
// a tiny Qwen3 with Qwen3's vocabulary of 151,936 tokens, so that the
// embedding (tied to the head) is 19 vocabulary blocks, each a unit: 3
// steps at 1, 2 and 4 ranks give the same bits. The model is 8 wide
// (dpQwen3): the emulator's time goes with the rank's elements, nearly
// all of them the vocabulary's rows, and the blocks are as many at any
// width.
//
// At 4 ranks each rank's device memory, as the stand-in driver counts
// its allocations from the group's opening on (MemStats' peak: the
// rank's weights, reduced gradient and moments, the rounds' sums, the
// unit buffers and the passes' activations), is at most 0.4 of one
// process's training state (16 bytes a parameter) plus the largest unit.
func TestDeviceZero3(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	q, z3 := "AIPO_DPD_QWEN3=1", "AIPO_DPD_ZERO=3"
	one, _, _, _ := dpDeviceRunAll(t, 1, Name, "", q, z3)
	for _, size := range []int{2, 4} {
		got, _, outs, _ := dpDeviceRunAll(t, size, Name, "", q, z3)
		if d := maxDiff(got, one); d != 0 {
			t.Errorf("stage 3 at %d ranks on the devices differs from 1 by up to %g; want the same bits", size, d)
		}
		if size != 4 {
			continue
		}
		cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
		if err != nil {
			t.Fatal(err)
		}
		cfg = dpQwen3(cfg)
		whole := 16 * model.ParamCount(cfg)
		var unit int64
		for _, u := range model.UnitsOf(cfg) {
			unit = max(unit, 4*int64(u.Len))
		}
		bound := 4*whole/10 + unit
		for r, out := range outs {
			peak := devicePeak(t, r, out)
			t.Logf("rank %d of 4 at stage 3: device peak %.3f of one process's training state (%d bytes); largest unit %.4f; bound %.3f",
				r, float64(peak)/float64(whole), whole, float64(unit)/float64(whole), float64(bound)/float64(whole))
			if peak > bound {
				t.Errorf("rank %d held %d bytes of device memory at its peak, more than %s", r, peak, fmt.Sprintf("0.4 x %d + %d = %d", whole, unit, bound))
			}
		}
	}
}

// TestDeviceZero3Resume saves a stage-3 group on the devices at 4 ranks
// after 2 steps (the ranks' parts of the optimiser state, brought from
// the devices, in the layout the host's stage 3 writes, and the weights
// gathered whole) and resumes it at 2 and at 1 rank for the third step:
// the weights and the gathered optimiser state have the sha256 of 3
// uninterrupted steps at 1 rank. The tiny Qwen2 fixture (a vocabulary of
// 97, one block) serves: what is saved and read is laid out by units and
// owners whatever the vocabulary, and the small head keeps the 5 runs
// cheap on the emulator.
func TestDeviceZero3Resume(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	z3 := "AIPO_DPD_ZERO=3"
	whole, _, _, wdir := dpDeviceRunAll(t, 1, Name, "", z3)
	saved := t.TempDir()
	dpDeviceRunAll(t, 4, Name, "", z3, "AIPO_DPD_STEPS=2", "AIPO_DPD_SAVE="+saved)
	for _, n := range []int{2, 1} {
		got, _, _, dir := dpDeviceRunAll(t, n, Name, "", z3, "AIPO_DPD_FIRST=2", "AIPO_DPD_STEPS=3", "AIPO_DPD_LOAD="+saved)
		if d := maxDiff(got, whole); d != 0 {
			t.Errorf("saved at 4 ranks, resumed at %d: the weights differ from 3 uninterrupted steps by up to %g; want the same bits", n, d)
		}
		if a, b := fileDigest(t, dir, "optimizer.bin"), fileDigest(t, wdir, "optimizer.bin"); a != b {
			t.Errorf("saved at 4 ranks, resumed at %d: the optimiser state's sha256 %s, uninterrupted %s", n, a, b)
		}
	}
	// As many ranks as shards (8 GPUs at the default 8 shards): one slot a
	// round, each round after the first added into the rounds' sum as its
	// units are reduced (BeginSlot's alone), no round's buffer beside it;
	// the bits of one rank's tree over the same 2 shards.
	pair1, _, _, p1 := dpDeviceRunAll(t, 1, Name, "", z3, "AIPO_DPD_SHARDS=2")
	pair2, _, _, p2 := dpDeviceRunAll(t, 2, Name, "", z3, "AIPO_DPD_SHARDS=2")
	if d := maxDiff(pair2, pair1); d != 0 {
		t.Errorf("2 shards at stage 3: 2 ranks (one slot a round) differ from 1 by up to %g; want the same bits", d)
	}
	if a, b := fileDigest(t, p2, "optimizer.bin"), fileDigest(t, p1, "optimizer.bin"); a != b {
		t.Errorf("2 shards at stage 3: 2 ranks' optimiser state %s, 1 rank's %s", a, b)
	}
}

// fileDigest is the sha256 of a saved file, in hex.
func fileDigest(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// dpQwen3 is the fixture cfg made a tiny Qwen3 (its q/k norm, tied head)
// with Qwen3's vocabulary, 19 blocks of it at ZeRO stage 3, and a hidden
// size of 8: the emulator runs every elementwise kernel over the
// rank's elements (the sums, AdamW) one emulated thread an element, and
// the vocabulary's rows are nearly all of them, so the width sets the
// test's time; the blocks are as many at any width.
func dpQwen3(cfg model.Config) model.Config {
	cfg.ModelType, cfg.HeadDim, cfg.VocabSize = "qwen3", 8, 151936
	cfg.HiddenSize, cfg.IntermediateSize = 8, 16
	return cfg
}

// TestDeviceZero3Reference runs ZeRO stage 3 on the devices with a KL
// term: the frozen reference is sharded as the policy is
// (backend.FrozenSharded: each rank keeps its elements of every unit on
// its device, and the scoring pass gathers each unit over the stand-in
// NCCL). Its log-probabilities must be the bits of the reference held
// whole on the device (the same kernels over the same weights, gathered),
// so 2 steps at 1, 2 and 4 ranks give weights and an optimiser state with
// the sha256 of the group whose reference is held whole. At 4 ranks each
// rank's device peak is at most its peak without a KL term plus what
// the plan counts for the reference on a GPU
// (trainer.PlanReferenceShardsOnDevices: its share, a quarter of the
// reference's float32 weights, two buffers of the largest unit and the
// reference model's rotary table). The start-up, as aipo train opens it
// (trainer.Learner.OnSharded: the passes opened without weights, each
// share placed from the host), peaks at what the plan counts for it
// (trainer.PlanStartOnDevices: the shares and the group's buffers alone),
// with and without the reference: before, each device held the whole
// policy, its gradients and the whole reference there for a moment.
// The tiny Qwen2 fixture (a vocabulary of 97, one block) and 2 steps keep
// the 5 runs cheap on the emulator.
func TestDeviceZero3Reference(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	z3, kl, steps := "AIPO_DPD_ZERO=3", "AIPO_DPD_KL=0.5", "AIPO_DPD_STEPS=2"
	whole, _, _, wdir := dpDeviceRunAll(t, 1, Name, "", z3, kl, steps, "AIPO_DPD_REF=whole")
	wantParams := digestOf(whole)
	wantOpt := fileDigest(t, wdir, "optimizer.bin")
	_, _, noKL, _ := dpDeviceRunAll(t, 4, Name, "", z3, steps)
	cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := trainer.PlanReferenceShardsOnDevices(cfg, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 4} {
		got, _, outs, dir := dpDeviceRunAll(t, n, Name, "", z3, kl, steps)
		if d := digestOf(got); d != wantParams {
			t.Errorf("the reference sharded over %d ranks: the weights' sha256 %s, with the reference whole %s (differing by up to %g)", n, d, wantParams, maxDiff(got, whole))
		}
		if d := fileDigest(t, dir, "optimizer.bin"); d != wantOpt {
			t.Errorf("the reference sharded over %d ranks: the optimiser state's sha256 %s, with the reference whole %s", n, d, wantOpt)
		}
		// As aipo train runs the steps (train/state.go): the rank's
		// share of the reference taken on the host before the passes
		// open, and placed from it each time they are opened again
		// after being parked: the same bits, the host holding what the
		// plan counts.
		shared, _, souts, sdir := dpDeviceRunAll(t, n, Name, "", z3, kl, steps, "AIPO_DPD_REF=share", "AIPO_DPD_PARK=1")
		if d := digestOf(shared); d != wantParams {
			t.Errorf("the reference's share kept on the host, %d ranks parked after each step: the weights' sha256 %s, with the reference whole %s (differing by up to %g)", n, d, wantParams, maxDiff(shared, whole))
		}
		if d := fileDigest(t, sdir, "optimizer.bin"); d != wantOpt {
			t.Errorf("the reference's share kept on the host, %d ranks parked after each step: the optimiser state's sha256 %s, with the reference whole %s", n, d, wantOpt)
		}
		checkHostMemory(t, cfg, n, true, false, souts)
		if n != 4 {
			continue
		}
		start, err := trainer.PlanStartOnDevices(cfg, 4, true, false)
		if err != nil {
			t.Fatal(err)
		}
		startNoKL, err := trainer.PlanStartOnDevices(cfg, 4, false, false)
		if err != nil {
			t.Fatal(err)
		}
		whole := 4 * model.ParamCount(cfg)
		for r, out := range outs {
			// At start-up each rank holds its shares and the group's
			// unit buffers alone, as the plan counts them; never the
			// whole policy (the passes are opened without weights,
			// Learner.OnSharded) nor the whole reference, which the
			// plan does not count. (The tiny model's rotary tables and
			// unit buffers outweigh a whole copy of it; a 7B's shares
			// and units are a fraction of one: plan's
			// TestPlanZero3OnGPUs.)
			for _, c := range []struct {
				what string
				got  int64
				plan trainer.StartOnDevice
			}{{"with the reference", startPeak(t, r, out), start[r]}, {"without a KL term", startPeak(t, r, noKL[r]), startNoKL[r]}} {
				t.Logf("rank %d of 4 at stage 3 %s: start-up peak %d bytes; the plan's %d (policy %d, its rotary table %d, reference %d); one whole float32 copy of the model %d",
					r, c.what, c.got, c.plan.Total(), c.plan.Policy, c.plan.PolicyRotary, c.plan.Reference, whole)
				if c.got > c.plan.Total() {
					t.Errorf("rank %d %s held %d bytes of device memory at start-up, more than the plan's %d (its shares and the group's buffers; a whole float32 copy of the model is %d)", r, c.what, c.got, c.plan.Total(), whole)
				}
			}
			peak, base := devicePeak(t, r, out), devicePeak(t, r, noKL[r])
			bound := base + ref[r].Total()
			t.Logf("rank %d of 4 at stage 3: device peak %d bytes with the reference sharded; %d without a KL term; the reference's plan %d (share %d, units %d, rotary table %d)",
				r, peak, base, ref[r].Total(), ref[r].Share, ref[r].Units, ref[r].Rotary)
			if peak > bound {
				t.Errorf("rank %d held %d bytes of device memory at its peak, more than %d without a KL term + the plan's %d for its part of the reference = %d", r, peak, base, ref[r].Total(), bound)
			}
		}
	}
}

var hostLine = regexp.MustCompile(`rank (\d+) host (\w+) weights (\d+) moments (\d+) staged (\d+) parts (\d+) ref (\d+) model (\d+)`)

// checkHostMemory holds what each of the n ranks reported holding on its
// host (trainer.DataParallel.HostMemory, measured on the buffers it
// holds, and the reference's share it keeps) to
// trainer.PlanHostOnDevices, the figures aipo plan counts, byte for
// byte, at three moments: after its steps (the host's copy of its share's
// weights and its moments, the reference's share), once the weights are
// gathered whole into the host model and a checkpoint's optimiser parts
// laid out (the share's weights let go, the parts held), and parked as
// aipo train parks it after every step (the parts gone); with the host
// model's whole float32 weights throughout (with bf16, the reference's
// share held as the bfloat16 passes read it). No staging buffer: the
// moments go between the host and the device straight from the
// optimiser's shard.
func checkHostMemory(t *testing.T, cfg model.Config, n int, kl, bf16 bool, outs []string) {
	t.Helper()
	plan, err := trainer.PlanHostOnDevices(cfg, n, kl, bf16)
	if err != nil {
		t.Fatal(err)
	}
	whole := 4 * model.ParamCount(cfg)
	for r, out := range outs {
		p := plan[r]
		want := map[string][6]int64{
			"step":       {p.Weights, p.Moments, p.Staging, 0, p.Reference, whole},
			"checkpoint": {0, p.Moments, p.Staging, p.Parts, p.Reference, whole},
			"parked":     {0, p.Moments, p.Staging, 0, p.Reference, whole},
		}
		seen := 0
		for _, m := range hostLine.FindAllStringSubmatch(out, -1) {
			w, ok := want[m[2]]
			if !ok {
				continue
			}
			seen++
			var got [6]int64
			for i := range got {
				got[i], _ = strconv.ParseInt(m[i+3], 10, 64)
			}
			t.Logf("rank %d of %d on its host (%s): share's weights %d, moments %d, staged %d, optimiser parts %d, the reference's share %d, the host model %d bytes; planned %v", r, n, m[2], got[0], got[1], got[2], got[3], got[4], got[5], w)
			if got != w {
				t.Errorf("rank %d of %d held %v bytes on its host (%s: the share's weights, its moments, the moments' staging, the optimiser's parts, the reference's share, the host model), the plan counts %v", r, n, got, m[2], w)
			}
		}
		if seen != len(want) {
			t.Errorf("rank %d of %d reported its host memory at %d of the %d moments:\n%s", r, n, seen, len(want), out)
		}
	}
}

// startPeak is the device peak of rank r's start-up, reported in out.
func startPeak(t *testing.T, r int, out string) int64 {
	t.Helper()
	return reportedPeak(t, r, out, startLine, "start-up peak")
}

// devicePeak is the device peak rank r reported in out.
func devicePeak(t *testing.T, r int, out string) int64 {
	t.Helper()
	return reportedPeak(t, r, out, peakLine, "device peak")
}

// reportedPeak is the bytes of the line of out that line matches (the
// rank and the bytes, its submatches); the test fails naming what when
// rank r's out has none.
func reportedPeak(t *testing.T, r int, out string, line *regexp.Regexp, what string) int64 {
	t.Helper()
	m := line.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rank %d reported no %s:\n%s", r, what, out)
	}
	peak, _ := strconv.ParseInt(m[2], 10, 64)
	return peak
}

// digestOf is the sha256 of float32 values as params.bin holds them, in
// hex.
func digestOf(x []float32) string {
	b := make([]byte, 0, 4*len(x))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestUnplacedPassesHoldNoWeights: the passes backend.ShardedOpener opens
// for ZeRO stage 3 (TrainSharded, EvalSharded; in float32 or bfloat16,
// an unknown precision refused) upload the rotary table
// alone, none of the model's weights or gradients, and refuse to run,
// step or hand over weights until the group places the rank's share;
// closing them frees the table. A one-rank group of the reference's
// passes places its share from the host model (ShardFrozen): 4 bytes a
// parameter then, beside the table.
func TestUnplacedPassesHoldNoWeights(t *testing.T) {
	dv := ownGPU(t)
	m := fixtureModel(t, "tiny_qwen2", 4)
	cfg := m.Config()
	cos, sin := model.RopeTableOf(cfg, cfg.MaxPositionEmbeddings)
	rope := uint64(4 * (len(cos) + len(sin)))
	must(t, dv.ReleaseScratch())
	live0, _ := dv.MemStats()
	d := cudaDevice{dv}
	pol, err := d.TrainSharded(m, backend.FP32)
	must(t, err)
	ref, err := d.EvalSharded(m, backend.FP32)
	must(t, err)
	if live, _ := dv.MemStats(); live-live0 != 2*rope {
		t.Errorf("the unplaced policy and reference hold %d bytes on the device, want their two rotary tables' %d", live-live0, 2*rope)
	}
	b := model.Batch{Tokens: []int32{1, 2, 3}, SeqLens: []int{3}}
	if _, err := pol.Run(b, nil); !errors.Is(err, errUnplaced) {
		t.Errorf("a pass of the unplaced policy: %v, want %v", err, errUnplaced)
	}
	if _, err := ref.Run(b, nil); !errors.Is(err, errUnplaced) {
		t.Errorf("a pass of the unplaced reference: %v, want %v", err, errUnplaced)
	}
	if err := pol.SyncParams(); !errors.Is(err, errUnplaced) {
		t.Errorf("the unplaced policy's weights: %v, want %v", err, errUnplaced)
	}
	if _, err := pol.Step(nil); !errors.Is(err, errUnplaced) {
		t.Errorf("a step of the unplaced policy: %v, want %v", err, errUnplaced)
	}
	// In bfloat16 too: the rotary table alone until the group places
	// the share.
	pol16, err := d.TrainSharded(m, backend.BF16)
	must(t, err)
	if live, _ := dv.MemStats(); live-live0 != 3*rope {
		t.Errorf("with unplaced passes in bfloat16 beside them the device holds %d bytes, want the three rotary tables' %d", live-live0, 3*rope)
	}
	if _, err := pol16.Run(b, nil); !errors.Is(err, errUnplaced) {
		t.Errorf("a pass of the unplaced policy in bfloat16: %v, want %v", err, errUnplaced)
	}
	must(t, pol16.Close())
	if _, err := d.TrainSharded(m, "fp8"); err == nil || !strings.Contains(err.Error(), `precision "fp8" is unknown`) {
		t.Errorf("unplaced passes in fp8: %v, want the unknown precision named", err)
	}
	units := model.UnitsOf(cfg)
	lay := backend.ShardLayout{}
	for _, u := range units {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
		lay.Parts = append(lay.Parts, []int{u.Off, u.Off + u.Len})
	}
	if _, err := ref.(backend.FrozenSharded).ShardFrozen(collective.Single(), lay); err != nil {
		t.Fatal(err)
	}
	if live, _ := dv.MemStats(); live-live0 != 2*rope+uint64(4*len(m.ParamData())) {
		t.Errorf("with the reference placed at one rank the device holds %d bytes, want the two rotary tables and its %d float32 weights (%d)", live-live0, len(m.ParamData()), 2*rope+uint64(4*len(m.ParamData())))
	}
	must(t, pol.Close())
	must(t, ref.Close())
	if live, _ := dv.MemStats(); live != live0 {
		t.Errorf("closed, the passes leave %d bytes on the device (before: %d)", live, live0)
	}
}

// TestUnplacedLoRAHoldsNoBase: the passes backend.ShardedOpener opens for
// a LoRA policy at ZeRO stage 3 (TrainSharded) upload the adapter, its
// gradients and the rotary table, nothing of the frozen base, and refuse
// to run until ShardBase places the rank's share of the base from the
// host model, while the adapter's weights can be read; a one-rank group
// places all of it (4 bytes a parameter) beside them, and closing frees
// all.
func TestUnplacedLoRAHoldsNoBase(t *testing.T) {
	dv := ownGPU(t)
	m := fixtureModel(t, "tiny_qwen2", 4)
	must(t, dpTestAdapter(m))
	cfg := m.Config()
	cos, sin := model.RopeTableOf(cfg, cfg.MaxPositionEmbeddings)
	rope := uint64(4 * (len(cos) + len(sin)))
	adapter := uint64(4 * len(m.AdapterParamData()))
	must(t, dv.ReleaseScratch())
	live0, _ := dv.MemStats()
	pol, err := cudaDevice{dv}.TrainSharded(m, backend.FP32)
	must(t, err)
	if !backend.TrainsAdapter(pol, m) {
		t.Fatal("the unplaced LoRA policy's passes do not train its adapter")
	}
	if live, _ := dv.MemStats(); live-live0 != rope+2*adapter {
		t.Errorf("the unplaced LoRA policy holds %d bytes on the device, want its rotary table and the adapter with its gradients, %d", live-live0, rope+2*adapter)
	}
	b := model.Batch{Tokens: []int32{1, 2, 3}, SeqLens: []int{3}}
	if _, err := pol.Run(b, nil); !errors.Is(err, errUnplaced) {
		t.Errorf("a pass of the LoRA policy before its base is placed: %v, want %v", err, errUnplaced)
	}
	want := slices.Clone(m.AdapterParamData())
	must(t, pol.SyncParams())
	if !slices.Equal(m.AdapterParamData(), want) {
		t.Error("the unplaced LoRA policy's adapter, read back, differs from the host's")
	}
	units := model.UnitsOf(cfg)
	lay := backend.ShardLayout{}
	for _, u := range units {
		lay.Units = append(lay.Units, [2]int{u.Off, u.Len})
		lay.Parts = append(lay.Parts, []int{u.Off, u.Off + u.Len})
	}
	if _, err := pol.(backend.BaseSharded).ShardBase(collective.Single(), lay); err != nil {
		t.Fatal(err)
	}
	if live, _ := dv.MemStats(); live-live0 != rope+2*adapter+uint64(4*len(m.ParamData())) {
		t.Errorf("with the base placed at one rank the device holds %d bytes, want the rotary table, the adapter with its gradients and the base's %d float32 weights (%d)", live-live0, len(m.ParamData()), rope+2*adapter+uint64(4*len(m.ParamData())))
	}
	must(t, pol.Close())
	if live, _ := dv.MemStats(); live != live0 {
		t.Errorf("closed, the passes leave %d bytes on the device (before: %d)", live, live0)
	}
}
