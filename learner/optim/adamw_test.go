package optim

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type fixtureStep struct {
	Grads    [][]float32 `json:"grads"`
	GradNorm float64     `json:"grad_norm"`
	LR       float64     `json:"lr"`
	Params   [][]float32 `json:"params"`
}

type fixtureScenario struct {
	Name    string        `json:"name"`
	Config  Config        `json:"config"`
	Tensors []TensorState `json:"tensors"`
	Init    [][]float32   `json:"init"`
	Steps   []fixtureStep `json:"steps"`
	ExpAvg  [][]float32   `json:"exp_avg"`
	ExpAvgS [][]float32   `json:"exp_avg_sq"`
}

// Tolerances against torch.optim.AdamW. Both sides run the update in
// float32 with the same operation order, but the norm differs: PyTorch sums
// squares in float32 per tensor and we in float64, so the clip factor and
// the reported norm differ by ~1e-7 relative (1e-6 allowed). That and
// one-ulp differences of individual operations propagate through ten steps.
// Measured: norms within 4e-8 relative, parameters within 1.5e-8 absolute
// (one or two float32 ulps), second moments within 2.5e-7 relative, first
// moments within 3e-9 absolute (they are sums of terms of either sign of
// size ~0.03, so rounding is relative to those terms, not to m). The bounds
// below leave a margin of ~10x over that and stay far below any real error
// (a missing bias correction or decay changes values by 1e-3 or more).
const (
	normRel   = 1e-6
	paramRel  = 2e-6
	paramAbs  = 2e-7
	momentRel = 2e-6
	mAbs      = 3e-8
	vAbs      = 1e-10
)

func loadScenarios(t *testing.T) []fixtureScenario {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "adamw.json"))
	if err != nil {
		t.Fatalf("%v: run /usr/bin/python3 scripts/optim_fixtures.py", err)
	}
	var f struct {
		Scenarios []fixtureScenario `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Scenarios) == 0 {
		t.Fatal("adamw.json has no scenarios")
	}
	return f.Scenarios
}

// worstDiff returns the index and size of the largest difference beyond
// rel*|want|+abs, or -1.
func worstDiff(got, want []float32, rel, abs float64) (int, float64) {
	wi, worst := -1, 0.0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > rel*math.Abs(float64(want[i]))+abs && d > worst {
			wi, worst = i, d
		}
	}
	return wi, worst
}

func TestAdamWMatchesPyTorch(t *testing.T) {
	for _, sc := range loadScenarios(t) {
		opt, err := New(sc.Config)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		params := make([]Param, len(sc.Tensors))
		for i, tn := range sc.Tensors {
			params[i] = Param{Name: tn.Name, Data: append([]float32(nil), sc.Init[i]...)}
		}
		for k, st := range sc.Steps {
			for i := range params {
				params[i].Grad = st.Grads[i]
			}
			if lr := opt.LR(); math.Abs(lr-st.LR) > 1e-12*math.Abs(st.LR)+1e-18 {
				t.Errorf("%s step %d: learning rate %.17g, PyTorch %.17g", sc.Name, k, lr, st.LR)
			}
			norm := opt.Step(params)
			if math.Abs(norm-st.GradNorm) > normRel*st.GradNorm {
				t.Errorf("%s step %d: gradient norm %.9g, PyTorch %.9g", sc.Name, k, norm, st.GradNorm)
			}
			for i, p := range params {
				if wi, d := worstDiff(p.Data, st.Params[i], paramRel, paramAbs); wi >= 0 {
					t.Errorf("%s step %d: tensor %q[%d] = %.9g, PyTorch %.9g (worst difference %.3g)", sc.Name, k, p.Name, wi, p.Data[wi], st.Params[i][wi], d)
				}
			}
		}
		for i, p := range params {
			s := opt.state[p.Name]
			if wi, d := worstDiff(s.m, sc.ExpAvg[i], momentRel, mAbs); wi >= 0 {
				t.Errorf("%s: first moment of %q[%d] = %.9g, PyTorch %.9g (worst difference %.3g)", sc.Name, p.Name, wi, s.m[wi], sc.ExpAvg[i][wi], d)
			}
			if wi, d := worstDiff(s.v, sc.ExpAvgS[i], momentRel, vAbs); wi >= 0 {
				t.Errorf("%s: second moment of %q[%d] = %.9g, PyTorch %.9g (worst difference %.3g)", sc.Name, p.Name, wi, s.v[wi], sc.ExpAvgS[i][wi], d)
			}
		}
		if opt.Steps() != int64(len(sc.Steps)) {
			t.Errorf("%s: %d steps counted, want %d", sc.Name, opt.Steps(), len(sc.Steps))
		}
	}
}

func randomParams(rng *rand.Rand, sizes map[string]int) []Param {
	var ps []Param
	for _, name := range []string{"a", "b", "c", "d"} {
		n, ok := sizes[name]
		if !ok {
			continue
		}
		p := Param{Name: name, Data: make([]float32, n), Grad: make([]float32, n)}
		for i := range p.Data {
			p.Data[i] = float32(rng.NormFloat64())
			p.Grad[i] = float32(rng.NormFloat64() * 0.01)
		}
		ps = append(ps, p)
	}
	return ps
}

func cloneParams(ps []Param) []Param {
	out := make([]Param, len(ps))
	for i, p := range ps {
		out[i] = Param{Name: p.Name, Data: append([]float32(nil), p.Data...), Grad: append([]float32(nil), p.Grad...)}
	}
	return out
}

// TestStateRoundTrip: an optimiser restored from MarshalState continues
// bit-identically to one that never stopped.
func TestStateRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	// Sizes span several parallel chunks and an empty tensor.
	params := randomParams(rng, map[string]int{"a": 3*chunkSize + 17, "b": 5, "c": 0, "d": 1000})
	cfg := DefaultConfig()
	cfg.LR, cfg.Schedule, cfg.WarmupSteps, cfg.TotalSteps, cfg.MinLRRatio = 1e-3, ScheduleWarmupCosine, 2, 8, 0.1
	a, _ := New(cfg)
	for k := 0; k < 3; k++ {
		a.Step(params)
	}
	blob, err := a.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(cfg)
	if err := b.UnmarshalState(blob); err != nil {
		t.Fatal(err)
	}
	if b.Steps() != 3 || b.LR() != a.LR() {
		t.Fatalf("restored steps %d lr %v, want 3 and %v", b.Steps(), b.LR(), a.LR())
	}
	pa, pb := params, cloneParams(params)
	for k := 0; k < 4; k++ {
		na, nb := a.Step(pa), b.Step(pb)
		if na != nb {
			t.Fatalf("step %d: norms %v and %v differ after restore", k, na, nb)
		}
	}
	for i := range pa {
		for j := range pa[i].Data {
			if pa[i].Data[j] != pb[i].Data[j] {
				t.Fatalf("tensor %q[%d]: %v without restore, %v with", pa[i].Name, j, pa[i].Data[j], pb[i].Data[j])
			}
		}
	}
	// Streaming form gives the same bytes.
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	again, _ := a.MarshalState()
	if !bytes.Equal(buf.Bytes(), again) {
		t.Error("WriteTo and MarshalState disagree")
	}
}

func TestStateCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	params := randomParams(rng, map[string]int{"a": 100, "b": 7})
	o, _ := New(DefaultConfig())
	o.Step(params)
	blob, _ := o.MarshalState()
	cases := map[string]struct {
		b      []byte
		phrase string
	}{
		"flipped byte":  {flip(blob, len(blob)-30), "checksum"},
		"truncated":     {blob[:len(blob)-100], "truncated"},
		"trailing":      {append(append([]byte(nil), blob...), 0), "after the end"},
		"wrong magic":   {append([]byte("NOTADAM!"), blob[8:]...), "magic"},
		"empty":         {nil, "preamble"},
		"wrong version": {flip(blob, 8), "version"},
	}
	for name, c := range cases {
		fresh, _ := New(DefaultConfig())
		err := fresh.UnmarshalState(c.b)
		if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("%s: error %v, want ErrState mentioning %q", name, err, c.phrase)
		}
		if fresh.Steps() != 0 || len(fresh.state) != 0 {
			t.Errorf("%s: a failed restore changed the optimiser", name)
		}
	}
	// A restored state that does not fit the model is reported by Check.
	restored, _ := New(DefaultConfig())
	if err := restored.UnmarshalState(blob); err != nil {
		t.Fatal(err)
	}
	bad := randomParams(rng, map[string]int{"a": 101, "b": 7})
	if err := restored.Check(bad); err == nil || !strings.Contains(err.Error(), `"a" has 101 values but its optimiser state has 100`) {
		t.Errorf("Check on a mismatched model: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x40
	return c
}

func TestNonFiniteGradientSkipsStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	params := randomParams(rng, map[string]int{"a": 10})
	before := append([]float32(nil), params[0].Data...)
	params[0].Grad[3] = float32(math.Inf(1))
	o, _ := New(DefaultConfig())
	if n := o.Step(params); !math.IsInf(n, 1) {
		t.Errorf("norm %v, want +Inf", n)
	}
	if o.Steps() != 0 {
		t.Errorf("a skipped step was counted")
	}
	for i := range before {
		if params[0].Data[i] != before[i] {
			t.Fatalf("a step with an infinite gradient changed the parameters")
		}
	}
}

func TestCheckAndConfigErrors(t *testing.T) {
	o, _ := New(DefaultConfig())
	if err := o.Check([]Param{{Name: "x", Data: make([]float32, 3), Grad: make([]float32, 2)}}); err == nil || !strings.Contains(err.Error(), "3 values but 2 gradients") {
		t.Errorf("length mismatch: %v", err)
	}
	if err := o.Check([]Param{{Name: "x"}, {Name: "x"}}); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("duplicate: %v", err)
	}
	for _, c := range []struct {
		edit   func(*Config)
		phrase string
	}{
		{func(c *Config) { c.LR = -1 }, "LR = -1"},
		{func(c *Config) { c.Beta1 = 1 }, "Beta1 = 1"},
		{func(c *Config) { c.Beta2 = math.NaN() }, "Beta2 = NaN"},
		{func(c *Config) { c.Eps = 0 }, "Eps = 0"},
		{func(c *Config) { c.GradClip = -1 }, "GradClip = -1"},
		{func(c *Config) { c.Schedule = "linear" }, `Schedule "linear" is unknown`},
		{func(c *Config) { c.Schedule, c.WarmupSteps, c.TotalSteps = ScheduleWarmupCosine, 10, 10 }, "TotalSteps = 10 must exceed"},
		{func(c *Config) { c.MinLRRatio = 2 }, "MinLRRatio = 2"},
	} {
		cfg := DefaultConfig()
		c.edit(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.phrase) {
			t.Errorf("error %v, want one mentioning %q", err, c.phrase)
		}
	}
}

// TestDefaultConfigIsPaper pins the defaults to the paper's Table 3 and the
// yaml names of a run configuration.
func TestDefaultConfigIsPaper(t *testing.T) {
	c := DefaultConfig()
	if c.LR != 1e-6 || c.Beta1 != 0.9 || c.Beta2 != 0.999 || c.Eps != 1e-8 || c.WeightDecay != 0.01 ||
		c.GradClip != 1 || c.WarmupSteps != 0 || c.Schedule != ScheduleConstant {
		t.Errorf("DefaultConfig() = %+v differs from Table 3", c)
	}
	src := "lr: 2e-6\nbeta1: 0.8\nbeta2: 0.95\neps: 1e-6\nweight_decay: 0\ngrad_clip: 0.5\nschedule: warmup-cosine\nwarmup_steps: 5\ntotal_steps: 50\nmin_lr_ratio: 0.1\n"
	got := DefaultConfig()
	if err := yaml.Unmarshal([]byte(src), &got); err != nil {
		t.Fatal(err)
	}
	want := Config{LR: 2e-6, Beta1: 0.8, Beta2: 0.95, Eps: 1e-6, GradClip: 0.5, Schedule: ScheduleWarmupCosine, WarmupSteps: 5, TotalSteps: 50, MinLRRatio: 0.1}
	if got != want {
		t.Errorf("yaml gave %+v, want %+v", got, want)
	}
	// The cosine ends at its floor and stays there.
	if lr := want.LRAt(50); math.Abs(lr-2e-7) > 1e-18 {
		t.Errorf("LRAt(50) = %v, want 2e-7", lr)
	}
	if want.LRAt(500) != want.LRAt(50) || want.LRAt(5) != 2e-6 || want.LRAt(0) != 0 {
		t.Errorf("schedule: LRAt(0)=%v LRAt(5)=%v LRAt(50)=%v LRAt(500)=%v", want.LRAt(0), want.LRAt(5), want.LRAt(50), want.LRAt(500))
	}
}

// TestParallelNormDeterministic: the norm does not depend on scheduling.
func TestParallelNormDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	params := randomParams(rng, map[string]int{"a": 5*chunkSize + 3, "b": 2 * chunkSize})
	first := GradNorm(params)
	var ref float64
	for _, p := range params {
		for _, g := range p.Grad {
			ref += float64(g) * float64(g)
		}
	}
	if math.Abs(first-math.Sqrt(ref)) > 1e-12*first {
		t.Errorf("GradNorm %v, serial %v", first, math.Sqrt(ref))
	}
	for i := 0; i < 10; i++ {
		if n := GradNorm(params); n != first {
			t.Fatalf("GradNorm varies between calls: %v then %v", first, n)
		}
	}
}

// WriteState and ReadState stream the same bytes as WriteTo and ReadFrom
// in chunks of at most stateChunk floats, whatever holds the moments: a
// tensor larger than a chunk arrives in pieces at the right offsets.
func TestStateStreamsInChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	params := randomParams(rng, map[string]int{"a": stateChunk + 17, "b": 5})
	o, _ := New(DefaultConfig())
	o.Step(params)
	o.Step(params)
	var want bytes.Buffer
	if _, err := o.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	// A second holder of the moments: flat arrays, as a device keeps them.
	flat := map[string][2][]float32{}
	var tensors []TensorState
	for _, name := range o.order {
		s := o.state[name]
		flat[name] = [2][]float32{append([]float32(nil), s.m...), append([]float32(nil), s.v...)}
		tensors = append(tensors, TensorState{Name: name, Numel: len(s.m)})
	}
	var got bytes.Buffer
	calls := 0
	if _, err := WriteState(&got, o.Steps(), o.Config(), tensors, func(ti, moment, off int, vals []float32) error {
		if len(vals) > stateChunk {
			t.Fatalf("a chunk of %d floats", len(vals))
		}
		calls++
		copy(vals, flat[tensors[ti].Name][moment][off:])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("WriteState from flat arrays differs from WriteTo")
	}
	if calls != 2*2+2 {
		t.Errorf("%d chunks, want 6 (a's m and v in two each, b's in one)", calls)
	}
	back := map[string][2][]float32{}
	var steps int64
	if _, err := ReadState(bytes.NewReader(want.Bytes()), func(st int64, ts []TensorState) error {
		steps = st
		for _, ts := range ts {
			back[ts.Name] = [2][]float32{make([]float32, ts.Numel), make([]float32, ts.Numel)}
		}
		return nil
	}, func(ti, moment, off int, vals []float32) error {
		copy(back[tensors[ti].Name][moment][off:], vals)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if steps != 2 {
		t.Errorf("steps %d, want 2", steps)
	}
	for name, mv := range flat {
		for k := range 2 {
			for i := range mv[k] {
				if math.Float32bits(mv[k][i]) != math.Float32bits(back[name][k][i]) {
					t.Fatalf("%s moment %d element %d: %v read back as %v", name, k, i, mv[k][i], back[name][k][i])
				}
			}
		}
	}
	// A corrupt stream fails on its checksum, after the chunks went by.
	bad := flip(want.Bytes(), want.Len()-30)
	if _, err := ReadState(bytes.NewReader(bad), func(int64, []TensorState) error { return nil },
		func(int, int, int, []float32) error { return nil }); !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("corrupt stream: %v", err)
	}
}
