package backend

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/learner/blas"
	"github.com/aipo-rl/aipo/learner/model"
)

// absent is a test backend: a registered name whose Open fails with a reason,
// as a backend without its hardware does.
type absent struct{ reason error }

func (a absent) Available() error                                { return a.reason }
func (a absent) Precisions() []string                            { return []string{FP32, BF16, "fp8"} }
func (a absent) Open() (Device, error)                           { return nil, a.reason }
func (a absent) StepMemory(Workload) (Memory, Memory)            { return Memory{}, Memory{} }
func (a absent) DecoderMemory(model.Config, bool) (int64, int64) { return 0, 0 }
func (a absent) Devices() ([]DeviceInfo, error)                  { return nil, a.reason }

var errAbsent = errors.New("test-absent: no device here (install one)")

func init() { Register("test-absent", absent{errAbsent}) }

func tinyModel(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{
		ModelType: "llama", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: 20, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu",
	}, 7)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLookupUnknownNamesTheRegistered(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"cpu", "test-absent"}) {
		t.Fatalf("Names() = %q, want [cpu test-absent] (sorted)", got)
	}
	_, err := Lookup("tpu")
	if err == nil {
		t.Fatal(`Lookup("tpu") succeeded; want an error`)
	}
	for _, want := range []string{`"tpu"`, "use cpu or test-absent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Lookup(tpu) error %q does not contain %q", err, want)
		}
	}
	b, err := Lookup("cpu")
	if err != nil || b.Available() != nil {
		t.Fatalf(`Lookup("cpu") = %v, %v; want the always-available CPU backend`, b, err)
	}
}

func TestUnavailableBackendSaysWhy(t *testing.T) {
	b, err := Lookup("test-absent")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Available(); !errors.Is(err, errAbsent) {
		t.Errorf("Available() = %v, want %v", err, errAbsent)
	}
	if _, err := b.Open(); !errors.Is(err, errAbsent) {
		t.Errorf("Open() = %v, want %v", err, errAbsent)
	}
	if devs, err := DevicesOf("test-absent"); !errors.Is(err, errAbsent) || len(devs) != 0 {
		t.Errorf("DevicesOf(test-absent) = %v, %v; want no device and %v", devs, err, errAbsent)
	}
	if _, err := DevicesOf("tpu"); err == nil || !strings.Contains(err.Error(), "use cpu or test-absent") {
		t.Errorf("DevicesOf(tpu) = %v; want the unknown-backend error", err)
	}
}

// The CPU backend's one device is this machine, its memory /proc/meminfo's
// as internal/meminfo reads it.
func TestCPUDevicesAreThisMachine(t *testing.T) {
	devs, err := DevicesOf(CPUName)
	total, avail, merr := meminfo.Read()
	if merr != nil {
		if err == nil || err.Error() != merr.Error() {
			t.Fatalf("without %s: DevicesOf(cpu) = %v, %v; want meminfo's error %v", meminfo.Source, devs, err, merr)
		}
		return
	}
	if err != nil || len(devs) != 1 {
		t.Fatalf("DevicesOf(cpu) = %v, %v; want one device", devs, err)
	}
	d := devs[0]
	if d.Backend != CPUName || d.ID != "0" || d.Kind != KindCPU || d.MemorySource != meminfo.Source || d.ComputeMajor != 0 ||
		!strings.Contains(d.Name, fmt.Sprintf("%d CPUs", runtime.NumCPU())) {
		t.Errorf("the CPU device: %+v", d)
	}
	// MemAvailable moves between two reads; MemTotal does not.
	if d.TotalBytes != total || d.FreeBytes <= 0 || d.FreeBytes > d.TotalBytes {
		t.Errorf("the CPU device has %d bytes, %d free; /proc/meminfo says %d, %d available", d.TotalBytes, d.FreeBytes, total, avail)
	}
}

// The CPU decoder is the host model: its float32 parameters, as many bytes
// as the model's Params hold.
func TestCPUDecoderMemoryIsTheModel(t *testing.T) {
	m := tinyModel(t)
	var want int64
	for _, p := range m.Params() {
		want += 4 * int64(len(p.Data))
	}
	b, err := Lookup(CPUName)
	if err != nil {
		t.Fatal(err)
	}
	if host, dev := b.DecoderMemory(m.Config(), false); host != want || dev != 0 {
		t.Errorf("DecoderMemory = %d host, %d device; want %d host (the model's parameters), 0 device", host, dev, want)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), `"cpu" is registered twice`) {
			t.Fatalf("second Register(cpu) recovered %v; want a panic naming the name", r)
		}
	}()
	Register("cpu", cpuBackend{})
}

func TestCheckPrecision(t *testing.T) {
	if err := CheckPrecision("cpu", FP32); err != nil {
		t.Errorf("cpu, fp32: %v", err)
	}
	if err := CheckPrecision("test-absent", BF16); err != nil {
		t.Errorf("test-absent, bf16: %v", err)
	}
	if err := CheckPrecision("cpu", BF16); err != nil {
		t.Errorf("cpu, bf16: %v", err)
	}
	err := CheckPrecision("cpu", "fp8")
	if err == nil || !strings.Contains(err.Error(), "fp8 needs backend test-absent (the cpu backend multiplies in fp32, bf16)") {
		t.Errorf("cpu, fp8: %v; want an error naming the backends that multiply in fp8", err)
	}
	if err := CheckPrecision("tpu", FP32); err == nil || !strings.Contains(err.Error(), "use cpu or test-absent") {
		t.Errorf("tpu, fp32: %v; want the unknown-backend error", err)
	}
}

// The CPU backend's passes are the model's own: the same bits as calling
// Forward, Backward and Extend on it.
func TestCPUBackendIsTheModel(t *testing.T) {
	b, _ := Lookup("cpu")
	dv, err := b.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dv.Close()
	if _, err := dv.Train(tinyModel(t), "fp8"); err == nil || !strings.Contains(err.Error(), "the CPU multiplies in fp32 or bf16") {
		t.Errorf("Train(fp8) on the CPU = %v, want a refusal naming fp32 and bf16", err)
	}
	// bf16 is the model's own bfloat16 products, fp32 turns them off.
	mixed := tinyModel(t)
	for _, p := range []string{BF16, FP32, BF16, ""} {
		if _, err := dv.Train(mixed, p); err != nil {
			t.Fatalf("Train(%q): %v", p, err)
		}
		if got := mixed.ComputesInBF16(); got != (p == BF16) {
			t.Errorf("Train(%q): the model computes in bfloat16: %v", p, got)
		}
	}
	toks := []int32{1, 5, 7, 3, 9, 2}
	batch := model.Batch{Tokens: toks}
	lossFn := func(lp, _ []float32) ([]float32, error) {
		g := make([]float32, len(lp))
		for i := range g {
			g[i] = -1
		}
		return g, nil
	}
	ref, viaBackend := tinyModel(t), tinyModel(t)
	a, err := ref.Forward(batch)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), a.LogProbs...)
	g, _ := lossFn(a.LogProbs, a.Entropy)
	if err := ref.Backward(a, g); err != nil {
		t.Fatal(err)
	}
	c, err := dv.Train(viaBackend, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Run(batch, lossFn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Run log-probs %v, want the model's %v", got, want)
	}
	if err := c.SyncParams(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(viaBackend.GradData(), ref.GradData()) {
		t.Error("gradients through the CPU backend differ from the model's own Backward")
	}

	dec, err := dv.Decoder(ref)
	if err != nil {
		t.Fatal(err)
	}
	cache := dec.NewCache()
	gotLogits, err := dec.Extend([]Cache{cache}, [][]int32{toks}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv := ref.NewKVCache()
	wantLogits, err := ref.Extend([]*model.KVCache{kv}, [][]int32{toks}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotLogits, wantLogits) || cache.Len() != len(toks) {
		t.Errorf("Decoder.Extend: %d cached, logits equal %v; want %d cached and the model's logits", cache.Len(), slices.Equal(gotLogits, wantLogits), len(toks))
	}
	if _, err := dec.Extend([]Cache{foreign{}}, [][]int32{toks}, nil); err == nil || !strings.Contains(err.Error(), "was not made by this decoder") {
		t.Errorf("Extend with a foreign cache = %v, want an error naming it", err)
	}
}

type foreign struct{}

func (foreign) Len() int        { return 0 }
func (foreign) Tokens() []int32 { return nil }
func (foreign) Truncate(int)    {}
func (foreign) Bytes() int      { return 0 }

// bf16Model is tinyModel with every weight rounded to a bfloat16 value
// (its high 16 bits kept), as a model loaded from a bfloat16 checkpoint.
func bf16Model(t *testing.T) *model.Model {
	t.Helper()
	m := tinyModel(t)
	for i, v := range m.ParamData() {
		m.ParamData()[i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
	}
	return m
}

// The CPU's Eval holds a bfloat16-exact model in bfloat16 and scores it as
// the float32 model scores, bit for bit; a model of other values stays as
// it is. StepMemory counts the reference at 2 bytes a parameter then.
func TestCPUEvalHoldsBF16References(t *testing.T) {
	b, _ := Lookup("cpu")
	dv, _ := b.Open()
	defer dv.Close()
	batch := model.Batch{Tokens: []int32{1, 5, 7, 3, 9, 2, 11, 4}, SeqLens: []int{5, 3}}
	want, _, err := bf16Model(t).Score(batch)
	if err != nil {
		t.Fatal(err)
	}
	ref := bf16Model(t)
	c, err := dv.Eval(ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if held := ref.HeldInBF16(); held != model.HoldsBF16Exactly() {
		t.Fatalf("Eval held a bfloat16-exact reference in bfloat16: %v; on these BLAS kernels (%s) it should: %v", held, blas.Backend(), model.HoldsBF16Exactly())
	}
	got, err := c.Run(batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("scored in bfloat16: %v, want the float32 model's %v", got, want)
	}
	other := tinyModel(t)
	if _, err := dv.Eval(other, ""); err != nil {
		t.Fatal(err)
	}
	if other.HeldInBF16() {
		t.Error("Eval narrowed float32 weights that are not bfloat16 values")
	}
	w := Workload{Model: ref.Config(), Pass: model.Packed(64, 64, false), Reference: true}
	f32, _ := b.StepMemory(w)
	w.ReferenceBF16 = true
	bf, _ := b.StepMemory(w)
	wantBF := int64(2) // bytes a reference parameter of bfloat16 values takes
	if !model.HoldsBF16Exactly() {
		wantBF = 4
	}
	if P := int64(ref.NumParams()); f32.Reference != 4*P || bf.Reference != wantBF*P {
		t.Errorf("reference bytes %d (float32 values), %d (bfloat16 values); want %d and %d", f32.Reference, bf.Reference, 4*P, wantBF*P)
	}
}
