package cuda

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/collective/gloo"
	"github.com/aipo-rl/aipo/learner/collective/nccl"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
	"github.com/aipo-rl/aipo/learner/loss"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/optim"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// dpLR is the learning rate of the device group's steps: large enough that
// every parameter moves each step.
const dpLR = 1e-2

// programDPDevice is one rank of TestDeviceDataParallel: the tiny Qwen2
// fixture's policy with its passes on the device (AIPO_DPD_BACKEND cuda,
// precision AIPO_DPD_PRECISION) or on the host (cpu, in bfloat16 too), in a Gloo group of
// the launcher's environment and, on the device, an NCCL communicator
// over which the group reduces (unless AIPO_DPD_HOST_REDUCED=1), takes 3
// data-parallel steps and rank 0 saves the parameters the passes hold to
// AIPO_DPD_SAVE/params.bin.
func programDPDevice() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
		return 1
	}
	ctx := context.Background()
	env, err := collective.EnvFromOS()
	if err != nil {
		return fail(err)
	}
	g, err := collective.Join(ctx, env, collective.Options{RendezvousTimeout: 30 * time.Second, OpTimeout: 60 * time.Second})
	if err != nil {
		return fail(err)
	}
	defer g.Close()
	comm, err := gloo.New(ctx, g)
	if err != nil {
		return fail(err)
	}
	defer comm.Close()
	cfg, err := model.LoadConfig("../model/testdata/tiny_qwen2_config.json")
	if err != nil {
		return fail(err)
	}
	qwen3 := os.Getenv("AIPO_DPD_QWEN3") != ""
	if qwen3 {
		cfg = dpQwen3(cfg)
	}
	m, err := model.New(cfg, 5)
	if err != nil {
		return fail(err)
	}
	oc := optim.DefaultConfig()
	oc.LR, oc.WeightDecay, oc.GradClip = dpLR, 0.1, 0.5
	opt, err := optim.New(oc)
	if err != nil {
		return fail(err)
	}
	l := &trainer.Learner{Policy: m, Opt: opt}
	kl, _ := strconv.ParseFloat(os.Getenv("AIPO_DPD_KL"), 64)
	lora := os.Getenv("AIPO_DPD_LORA") != ""
	if lora {
		// A LoRA adapter on every projection, with dropout and B drawn
		// (dpTestAdapter); the KL term's reference is then the base.
		if err := dpTestAdapter(m); err != nil {
			return fail(err)
		}
	}
	if kl != 0 && !lora {
		// A KL term against a reference of other weights than the
		// policy's start, so that it counts from the first step.
		if l.Ref, err = model.New(cfg, 6); err != nil {
			return fail(err)
		}
	}
	if os.Getenv("AIPO_DPD_BACKEND") != Name && os.Getenv("AIPO_DPD_PRECISION") == backend.BF16 {
		// The host's passes in bfloat16 (the cpu backend's
		// model.SetComputeBF16): the policy's and the reference's
		// products round their operands as they read them.
		m.SetComputeBF16(true)
		if l.Ref != nil {
			l.Ref.SetComputeBF16(true)
		}
	}
	var dv *Device
	free, reopen := func() {}, func() error { return nil }
	if os.Getenv("AIPO_DPD_BACKEND") == Name {
		// Every rank opens GPU 0, the stand-in driver's one device,
		// which the ranks share (real NCCL wants a GPU a rank).
		dev, err := cudaBackend{}.OpenDevice(0)
		if err != nil {
			return fail(err)
		}
		defer dev.Close()
		dv = dev.(cudaDevice).dv
		if os.Getenv("AIPO_DPD_REF") == "share" && l.Ref != nil {
			// As aipo train keeps it at stage 3 on the devices: the
			// rank's share of the reference on the host, taken before
			// the passes open; the whole reference goes.
			share, err := trainer.NewReferenceShare(l.Ref, comm.Size(), comm.Rank(), os.Getenv("AIPO_DPD_PRECISION") == backend.BF16)
			if err != nil {
				return fail(err)
			}
			l.Ref, l.RefShare = nil, share
		}
		on := l.On
		if os.Getenv("AIPO_DPD_ZERO") == "3" && os.Getenv("AIPO_DPD_REF") != "whole" && os.Getenv("AIPO_DPD_HOST_REDUCED") != "1" {
			// As aipo train opens a stage-3 group's passes: without
			// the models' weights, each share placed by the group.
			on = l.OnSharded
		}
		free, err = on(dev, os.Getenv("AIPO_DPD_PRECISION"))
		if err != nil {
			return fail(err)
		}
		defer func() { free() }()
		if os.Getenv("AIPO_DPD_PARK") == "1" {
			// As aipo train takes its steps: the weights gathered into
			// the host model, the rank's state brought to the host and
			// the passes closed after each step, and opened again
			// (OnSharded) for the next, which places the shares anew.
			reopen = func() error {
				if err := l.SyncPolicy(); err != nil {
					return err
				}
				if err := l.ParkDevice(); err != nil {
					return err
				}
				free()
				free, err = l.OnSharded(dev, os.Getenv("AIPO_DPD_PRECISION"))
				return err
			}
		}
		// The reference's passes hold it on the device; the host's
		// copy goes, as aipo train lets it go.
		l.Ref = nil
		if os.Getenv("AIPO_DPD_REF") == "whole" && l.RefCompute != nil {
			// The reference's passes as they are without
			// backend.FrozenSharded: held whole on each device.
			l.RefCompute = struct{ trainer.Compute }{l.RefCompute}
		}
	}
	zero, _ := strconv.Atoi(os.Getenv("AIPO_DPD_ZERO"))
	shards, _ := strconv.Atoi(os.Getenv("AIPO_DPD_SHARDS"))
	dc := trainer.DPConfig{Zero: zero, Shards: shards}
	if os.Getenv("AIPO_DPD_BACKEND") == Name && os.Getenv("AIPO_DPD_HOST_REDUCED") != "1" {
		// The default on a device: the gradients reduced and the
		// moments kept on the devices, over NCCL (the stand-in NCCL
		// without a GPU), device 0 for every rank as above.
		dcomm, err := nccl.New(ctx, g, nccl.Options{Device: 0})
		if err != nil {
			return fail(err)
		}
		defer dcomm.Close()
		dc.DeviceComm = dcomm
	}
	if err := l.EnableDataParallel(comm, dc); err != nil {
		return fail(err)
	}
	if dir := os.Getenv("AIPO_DPD_LOAD"); dir != "" {
		// A checkpoint of the group's: the whole weights and the
		// ranks' parts of the optimiser state (written by a group of
		// any size).
		if err := dpLoad(l, dir); err != nil {
			return fail(err)
		}
	}
	if l.DP.OnDevices() {
		fmt.Println("reducing on the devices over nccl")
	}
	if dv != nil {
		// The start-up's peak: the passes opened and the group's
		// shares placed (and a checkpoint's state loaded into them).
		_, peak := dv.MemStats()
		fmt.Printf("rank %d start-up peak %d\n", comm.Rank(), peak)
		// From here on: what the sharded group and the passes take.
		dv.ResetPeak()
	}
	rc := trainer.RLConfig{Loss: loss.DefaultConfig(), MicroBatchTokens: 24, PPOEpochs: 1, MiniBatches: 2}
	rc.Loss.KLCoef = kl
	samples := 16
	if qwen3 {
		// Each shard one micro-batch, a quarter of the samples and one
		// mini-batch a step: the emulator runs every kernel over the
		// vocabulary's rows one emulated thread an element.
		rc.MicroBatchTokens, rc.MiniBatches, samples = 4096, 1, 4
	}
	if lora {
		// Half the samples in one mini-batch a step: each of the eight
		// shards a micro-batch, the emulator's time per pass being the
		// adapter's GEMMs beside the base's.
		rc.MiniBatches, samples = 1, 8
	}
	first, steps := 0, 3
	if s := os.Getenv("AIPO_DPD_STEPS"); s != "" {
		first, _ = strconv.Atoi(os.Getenv("AIPO_DPD_FIRST"))
		steps, _ = strconv.Atoi(s)
	}
	for k := first; k < steps; k++ {
		st, err := l.RLStepDP(ctx, rc, dpDeviceSamples(k, cfg.VocabSize)[:samples])
		if err != nil {
			return fail(fmt.Errorf("step %d: %w", k, err))
		}
		fmt.Printf("step %d: loss %.9g grad-norm %.9g tokens %d\n", k, st.Loss, st.GradNorm, st.Tokens)
		if k+1 < steps {
			if err := reopen(); err != nil {
				return fail(fmt.Errorf("step %d: parking and reopening the passes: %w", k, err))
			}
		}
	}
	if dv != nil {
		_, peak := dv.MemStats()
		fmt.Printf("rank %d device peak %d\n", comm.Rank(), peak)
	}
	hostReport(l, "step", comm.Rank())
	// The parameters the passes run with, brought back from the device:
	// they are the group's only if each step's gathered update reached it.
	if err := l.SyncPolicy(); err != nil {
		return fail(err)
	}
	if dir := os.Getenv("AIPO_DPD_SAVE"); dir != "" && l.DP.Zero == 3 && !lora {
		if err := dpSave(ctx, l, dir); err != nil {
			return fail(err)
		}
	}
	if hostReport(l, "checkpoint", comm.Rank()) {
		// Parked as aipo train parks the passes after every step (the
		// rank's state brought to the host, the group closed).
		if err := l.ParkDevice(); err != nil {
			return fail(err)
		}
		hostReport(l, "parked", comm.Rank())
	}
	var saved []float32
	if !lora {
		saved = m.ParamData()
	} else {
		// What a LoRA group trains: the adapter, and its optimiser
		// state, gathered from the ranks' shares.
		saved = m.AdapterParamData()
		var opt bytes.Buffer
		if err := l.WriteOptimizerDP(ctx, &opt); err != nil {
			return fail(err)
		}
		if dir := os.Getenv("AIPO_DPD_SAVE"); dir != "" && comm.Rank() == 0 {
			if err := os.WriteFile(filepath.Join(dir, "optimizer.bin"), opt.Bytes(), 0o644); err != nil {
				return fail(err)
			}
		}
	}
	if dir := os.Getenv("AIPO_DPD_SAVE"); dir != "" && comm.Rank() == 0 {
		b := make([]byte, 0, 4*len(saved))
		for _, x := range saved {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		if err := os.WriteFile(filepath.Join(dir, "params.bin"), b, 0o644); err != nil {
			return fail(err)
		}
	}
	fmt.Println("done")
	return 0
}

// hostReport prints what rank holds on its host at a stage-3 group on
// the devices at the moment named when (trainer.DataParallel.HostMemory,
// measured on the buffers it holds; the reference's share kept on the
// host; the host model's whole weights), and reports whether it did
// (nothing for other groups).
func hostReport(l *trainer.Learner, when string, rank int) bool {
	if l.DP == nil || l.DP.Zero != 3 || !l.DP.OnDevices() || l.Policy.HasAdapter() {
		return false
	}
	h := l.DP.HostMemory()
	var ref int64
	if l.RefShare != nil {
		ref = l.RefShare.Bytes()
	}
	fmt.Printf("rank %d host %s weights %d moments %d staged %d parts %d ref %d model %d\n", rank, when, h.Weights, h.Moments, h.Staging, h.Parts, ref, 4*int64(cap(l.Policy.ParamData())))
	return true
}

// dpDeviceSamples is step k's batch: 16 trajectories of 2 to 12 response
// tokens with mixed sources and advantages, the same in every process.
func dpDeviceSamples(k, vocab int) []trainer.RLSample {
	r := rand.New(rand.NewPCG(uint64(k), 78))
	out := make([]trainer.RLSample, 16)
	sources := []loss.Source{loss.Internal, loss.Internal, loss.External, loss.Untrained}
	for i := range out {
		s := trainer.RLSample{Sequence: trainer.Sequence{Prompt: []int32{1, int32(2 + r.IntN(vocab-2))}}, Advantage: float32(r.NormFloat64())}
		for range 2 + r.IntN(11) {
			s.Response = append(s.Response, int32(2+r.IntN(vocab-2)))
			s.Source = append(s.Source, sources[r.IntN(len(sources))])
		}
		out[i] = s
	}
	return out
}

var stepLine = regexp.MustCompile(`step (\d+): loss (\S+) grad-norm (\S+)`)

// dpDeviceRun runs size ranks of programDPDevice on backend (cuda or cpu)
// and returns the saved parameters and each step's loss and gradient norm.
func dpDeviceRun(t *testing.T, size int, backendName, precision string, zero ...string) (params []float32, steps [][2]float64) {
	t.Helper()
	params, steps, _, _ = dpDeviceRunAll(t, size, backendName, precision, zero...)
	return params, steps
}

// dpDeviceRunAll is dpDeviceRun that returns every rank's output too, and
// the directory the ranks saved to (AIPO_DPD_SAVE among the variables, or
// a new one).
func dpDeviceRunAll(t *testing.T, size int, backendName, precision string, zero ...string) (params []float32, steps [][2]float64, outs []string, dir string) {
	t.Helper()
	dir = t.TempDir()
	for _, v := range zero {
		if d, ok := strings.CutPrefix(v, "AIPO_DPD_SAVE="); ok {
			dir = d
		}
	}
	onDevices := backendName == Name && !slices.Contains(zero, "AIPO_DPD_HOST_REDUCED=1")
	wait := 3 * time.Minute
	if slices.Contains(zero, "AIPO_DPD_QWEN3=1") || slices.Contains(zero, "AIPO_DPD_ZERO=3") || slices.Contains(zero, "AIPO_DPD_LORA=1") {
		// Qwen3's vocabulary on the emulator; stage 3's elementwise
		// kernels, a unit at a time; the adapter's GEMMs.
		wait = 15 * time.Minute
	}
	rs := disttest.Launch(t, disttest.Spec{Program: "dpdevice", Size: size, Limit: wait, Env: func(int) []string {
		return append([]string{"AIPO_DPD_BACKEND=" + backendName, "AIPO_DPD_PRECISION=" + precision, "AIPO_DPD_SAVE=" + dir}, zero...)
	}})
	for _, e := range rs.Wait(wait) {
		if e.Code != 0 {
			t.Fatalf("%s %s, %d ranks: rank %d exited %d:\n%s", backendName, precision, size, e.Rank, e.Code, e.Output)
		}
	}
	out := rs.Output(0)
	if got := strings.Contains(out, "reducing on the devices over nccl"); got != onDevices {
		t.Fatalf("%s %s %v, %d ranks: reducing on the devices %v, want %v:\n%s", backendName, precision, zero, size, got, onDevices, out)
	}
	for _, m := range stepLine.FindAllStringSubmatch(out, -1) {
		lossV, _ := strconv.ParseFloat(m[2], 64)
		norm, _ := strconv.ParseFloat(m[3], 64)
		steps = append(steps, [2]float64{lossV, norm})
	}
	if want := dpStepsOf(zero); len(steps) != want {
		t.Fatalf("%s, %d ranks: rank 0 reported %d steps:\n%s", backendName, size, len(steps), out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "params.bin"))
	if err != nil {
		t.Fatal(err)
	}
	params = make([]float32, len(b)/4)
	for i := range params {
		params[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	sum := sha256.Sum256(b)
	t.Logf("%s %s %s, %d ranks: params %s; %s", backendName, precision, strings.Join(zero, " "), size, hex.EncodeToString(sum[:8]), strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(out), "\n", ";")), " "))
	for r := range size {
		outs = append(outs, rs.Output(r))
	}
	return params, steps, outs, dir
}

// TestDeviceDataParallel runs the learner's data-parallel group with its
// passes on the device: each rank sums its virtual shards' gradients on
// the device, the ranks reduce them there over NCCL (the stand-in NCCL,
// learner/collective/nccl/testdata/fakenccl.c, without a GPU) and step
// their shares of the optimiser state on the device, and gather the
// updated parameters over NCCL (backend.DeviceReduced); no gradient
// comes to the host. A step is the same bits at 1, 2 and 4 ranks (and at
// 1 and 2 ranks of 2 shards, a rank's one shard read in place), at
// ZeRO stage 2 too, in float32 and with bfloat16 GEMM operands (whose
// copy of the parameters must be refreshed from the gathered masters),
// and agrees with the group whose passes run on the host and with the
// device group that reduces on the host (backend.HostReduced).
//
// Tolerance against the host: the passes agree as TestParityModelStep
// measures (gradients within 1e-3 of each tensor's largest magnitude,
// mostly far closer); the first step starts from the same parameters, so
// its loss agrees to 1e-5 relative and its gradient norm to 1e-3. After
// three AdamW steps a parameter whose gradient is near zero can move the
// other way (AdamW's first updates are about lr times the gradient's
// sign), so a single parameter may differ by up to 2 lr per step; the
// mean difference stays below 1e-4 lr.
func TestDeviceDataParallel(t *testing.T) {
	needDriver(t)
	if err := gloo.Available(); err != nil {
		t.Fatalf("the group's engine: %v", err)
	}
	one, oneSteps := dpDeviceRun(t, 1, Name, "")
	for _, size := range []int{2, 4} {
		got, _ := dpDeviceRun(t, size, Name, "")
		if d := maxDiff(got, one); d != 0 {
			t.Errorf("%d ranks on the device differ from 1 by up to %g; want the same bits", size, d)
		}
	}
	// Stage 2 exchanges the last shard's gradient piece by piece once it
	// is on the host (the device's pass does not report its runs).
	z2, _ := dpDeviceRun(t, 4, Name, "", "AIPO_DPD_ZERO=2")
	if d := maxDiff(z2, one); d != 0 {
		t.Errorf("4 ranks on the device at ZeRO stage 2 differ from 1 at stage 1 by up to %g; want the same bits", d)
	}
	bf1, _ := dpDeviceRun(t, 1, Name, backend.BF16)
	bf2, _ := dpDeviceRun(t, 2, Name, backend.BF16)
	if d := maxDiff(bf2, bf1); d != 0 {
		t.Errorf("bf16: 2 ranks on the device differ from 1 by up to %g; want the same bits", d)
	}
	if d := maxDiff(bf1, one); d == 0 {
		t.Error("bf16 steps gave float32's bits: the bfloat16 copy was not used")
	}
	// The device group that reduces on the host over Gloo: its AdamW is
	// the host's, so it agrees with the device's within the bound below.
	hr, _ := dpDeviceRun(t, 2, Name, "", "AIPO_DPD_HOST_REDUCED=1")
	t.Logf("2 ranks reducing on the host against 1 on the devices after 3 steps: max %.3g", maxDiff(hr, one))
	if d := maxDiff(hr, one); d > 6*dpLR {
		t.Errorf("2 ranks reducing on the host against 1 on the devices: max %g (bound %g)", d, 6*dpLR)
	}
	// A rank of one shard (a group of one's default, trainer.SingleShards)
	// reduces it where the passes wrote it, and a group of one steps from
	// its partial sum without an exchange: the host's step of one shard
	// within the same bounds.
	lone, _ := dpDeviceRun(t, 1, Name, "", "AIPO_DPD_SHARDS=1")
	loneHost, _ := dpDeviceRun(t, 1, "cpu", "", "AIPO_DPD_SHARDS=1")
	t.Logf("one shard, device against host after 3 steps: max %.3g", maxDiff(lone, loneHost))
	if d := maxDiff(lone, loneHost); d > 6*dpLR {
		t.Errorf("one shard on the device against the host: max %g (bound %g)", d, 6*dpLR)
	}
	if maxDiff(lone, one) == 0 {
		t.Error("one shard on the device gave 8 shards' bits: the split was not used")
	}
	// Two ranks of one shard each send their shard from where the passes
	// wrote it: the bits of one rank's tree of the same two shards.
	pair1, _ := dpDeviceRun(t, 1, Name, "", "AIPO_DPD_SHARDS=2")
	pair2, _ := dpDeviceRun(t, 2, Name, "", "AIPO_DPD_SHARDS=2")
	if d := maxDiff(pair2, pair1); d != 0 {
		t.Errorf("2 shards: 2 ranks on the device (one shard each, read in place) differ from 1 by up to %g; want the same bits", d)
	}
	host, hostSteps := dpDeviceRun(t, 1, "cpu", "")
	if d := math.Abs(oneSteps[0][0]-hostSteps[0][0]) / math.Abs(hostSteps[0][0]); d > 1e-5 {
		t.Errorf("first step's loss: device %g, host %g (relative %g > 1e-5)", oneSteps[0][0], hostSteps[0][0], d)
	}
	if d := math.Abs(oneSteps[0][1]-hostSteps[0][1]) / hostSteps[0][1]; d > 1e-3 {
		t.Errorf("first step's gradient norm: device %g, host %g (relative %g > 1e-3)", oneSteps[0][1], hostSteps[0][1], d)
	}
	var mean float64
	for i := range host {
		mean += math.Abs(float64(one[i] - host[i]))
	}
	mean /= float64(len(host))
	maxD := maxDiff(one, host)
	t.Logf("device against host after 3 steps: max %.3g, mean %.3g", maxD, mean)
	if maxD > 6*dpLR || mean > 1e-4*dpLR {
		t.Errorf("device against host after 3 steps: max %g (bound %g), mean %g (bound %g)", maxD, 6*dpLR, mean, 1e-4*dpLR)
	}
}

// maxDiff is the largest elementwise difference of two equally long
// vectors (+Inf when their lengths differ).
func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// dpStepsOf is the steps a run of programDPDevice with these variables
// reports.
func dpStepsOf(vars []string) int {
	first, steps := 0, 3
	for _, v := range vars {
		if s, ok := strings.CutPrefix(v, "AIPO_DPD_FIRST="); ok {
			first, _ = strconv.Atoi(s)
		}
		if s, ok := strings.CutPrefix(v, "AIPO_DPD_STEPS="); ok {
			steps, _ = strconv.Atoi(s)
		}
	}
	return steps - first
}

func dpPartName(i, n int) string { return fmt.Sprintf("optimizer-%d-of-%d.bin", i, n) }

// dpSave writes the group's optimiser state to dir as a checkpoint does:
// every rank its part (laid out together first), rank 0 the index and the
// gathered one-process file (optimizer.bin), every rank taking part.
func dpSave(ctx context.Context, l *trainer.Learner, dir string) error {
	var whole bytes.Buffer
	if err := l.WriteOptimizerDP(ctx, &whole); err != nil {
		return err
	}
	if err := l.PrepareOptimizerParts(ctx); err != nil {
		return err
	}
	var part bytes.Buffer
	if err := l.WriteOptimizerPart(&part); err != nil {
		return err
	}
	rank, n := l.DP.Comm.Rank(), l.DP.Comm.Size()
	if err := os.WriteFile(filepath.Join(dir, dpPartName(rank+1, n)), part.Bytes(), 0o644); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	idx, err := json.Marshal(l.OptimizerIndex(dpPartName))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "optimizer.index.json"), idx, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "optimizer.bin"), whole.Bytes(), 0o644)
}

// dpLoad restores the weights (params.bin) and this rank's share of the
// optimiser state (from the parts that hold it) saved in dir.
func dpLoad(l *trainer.Learner, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "params.bin"))
	if err != nil {
		return err
	}
	flat := make([]float32, len(b)/4)
	for i := range flat {
		flat[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if err := l.LoadPolicy(flat); err != nil {
		return err
	}
	ib, err := os.ReadFile(filepath.Join(dir, "optimizer.index.json"))
	if err != nil {
		return err
	}
	x, err := optim.ParsePartIndex(ib)
	if err != nil {
		return err
	}
	return l.ReadOptimizerParts(x, func(file string) (io.ReadCloser, error) { return os.Open(filepath.Join(dir, file)) })
}
