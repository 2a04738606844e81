package peft

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/learner/checkpoint"
)

var tiny = Dims{Layers: 2, Hidden: 8, Intermediate: 12, QDim: 8, KVDim: 4}

func newTiny(t *testing.T, targets []string) *Adapter {
	t.Helper()
	c, err := NewConfig("tiny-base", 4, 8, 0.05, targets, InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(c, tiny, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	// B starts at zero; give it values so that a round trip and a merge
	// are tested on something.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range a.Modules {
		for j := range a.Modules[i].B {
			a.Modules[i].B[j] = float32(rng.NormFloat64())
		}
	}
	return a
}

func TestNewFollowsPEFTInit(t *testing.T) {
	c, err := NewConfig("b", 4, 8, 0, nil, InitDefault)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(c, tiny, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(a.Modules), tiny.Layers*len(Targets); got != want {
		t.Fatalf("%d modules, want %d (every target of every layer)", got, want)
	}
	for _, m := range a.Modules {
		bound := float32(1 / math.Sqrt(float64(m.In)))
		for _, v := range m.A {
			if v < -bound || v > bound {
				t.Fatalf("%s: A value %v outside ±1/√in = %v", m.Base(), v, bound)
			}
		}
		for _, v := range m.B {
			if v != 0 {
				t.Fatalf("%s: B must start at zero so that the adapted model equals the base, got %v", m.Base(), v)
			}
		}
	}
	if a.Modules[0].Target != "q_proj" || a.Modules[6].Target != "down_proj" || a.Modules[7].Layer != 1 {
		t.Errorf("modules not ordered by layer then target: %v %v %v", a.Modules[0].Base(), a.Modules[6].Base(), a.Modules[7].Base())
	}
	if got, want := a.Config.Scale(), float32(2); got != want {
		t.Errorf("scale %v, want alpha/r = %v", got, want)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	a := newTiny(t, []string{"v_proj", "q_proj", "down_proj"})
	dir := t.TempDir()
	if err := Write(context.Background(), dir, a, checkpoint.F32); err != nil {
		t.Fatal(err)
	}
	h, err := checkpoint.ReadHeaderFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]int{}
	for _, ti := range h.Tensors {
		names[ti.Name] = ti.Shape
	}
	// PEFT's keys and shapes: lora_A [r, in], lora_B [out, r].
	for key, shape := range map[string][]int{
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {4, 8},
		"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": {8, 4},
		"base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight": {4, 4},
		"base_model.model.model.layers.1.mlp.down_proj.lora_A.weight":    {4, 12},
	} {
		if got := names[key]; len(got) != 2 || got[0] != shape[0] || got[1] != shape[1] {
			t.Errorf("%s: shape %v, want %v", key, got, shape)
		}
	}
	if len(names) != 2*2*3 {
		t.Errorf("%d tensors, want 12", len(names))
	}
	var raw map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 8.0, "base_model_name_or_path": "tiny-base", "bias": "none"} {
		if raw[k] != want {
			t.Errorf("adapter_config.json %s = %v, want %v", k, raw[k], want)
		}
	}
	got, err := Read(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Modules) != len(a.Modules) {
		t.Fatalf("read %d modules, wrote %d", len(got.Modules), len(a.Modules))
	}
	for i, m := range a.Modules {
		g := got.Modules[i]
		if g.Layer != m.Layer || g.Target != m.Target || g.In != m.In || g.Out != m.Out {
			t.Fatalf("module %d: read %s %dx%d, wrote %s %dx%d", i, g.Base(), g.In, g.Out, m.Base(), m.In, m.Out)
		}
		for j := range m.A {
			if g.A[j] != m.A[j] {
				t.Fatalf("%s A[%d]: %v, wrote %v", m.Base(), j, g.A[j], m.A[j])
			}
		}
		for j := range m.B {
			if g.B[j] != m.B[j] {
				t.Fatalf("%s B[%d]: %v, wrote %v", m.Base(), j, g.B[j], m.B[j])
			}
		}
	}
	if err := got.CheckBase(tiny); err != nil {
		t.Errorf("CheckBase on its own base: %v", err)
	}
	other := tiny
	other.Intermediate = 16
	if err := got.CheckBase(other); err == nil || !strings.Contains(err.Error(), "another base") {
		t.Errorf("CheckBase on a base of another MLP size: %v, want an error naming another base", err)
	}
}

func TestMergeIsWPlusScaledBA(t *testing.T) {
	a := newTiny(t, []string{"o_proj"})
	var base []checkpoint.Tensor
	rng := rand.New(rand.NewPCG(5, 6))
	for l := 0; l < tiny.Layers; l++ {
		w := make([]float32, tiny.Hidden*tiny.QDim)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		base = append(base, checkpoint.Tensor{Name: baseName(l, "o_proj") + ".weight", Shape: []int{tiny.Hidden, tiny.QDim}, Data: w},
			checkpoint.Tensor{Name: "model.norm.weight", Shape: []int{tiny.Hidden}, Data: make([]float32, tiny.Hidden)})
	}
	merged, err := a.Merge(base)
	if err != nil {
		t.Fatal(err)
	}
	r, s := a.Config.R, float64(a.Config.Scale())
	for _, m := range a.Modules {
		var w, got []float32
		for i, bt := range base {
			if bt.Name == m.Base() {
				w, got = bt.Data, merged[i].Data
			}
		}
		for o := 0; o < m.Out; o++ {
			for i := 0; i < m.In; i++ {
				want := float64(w[o*m.In+i])
				for k := 0; k < r; k++ {
					want += s * float64(m.B[o*r+k]) * float64(m.A[k*m.In+i])
				}
				// float32 GEMM of an r-term sum against the float64 sum:
				// r+1 roundings of values of order 10 (|B|~1, |A|<=1/√in, s=2).
				if d := float64(got[o*m.In+i]) - want; d > 1e-5 || d < -1e-5 {
					t.Fatalf("%s[%d,%d]: merged %v, want %v", m.Base(), o, i, got[o*m.In+i], want)
				}
			}
		}
	}
	if &merged[1].Data[0] != &base[1].Data[0] {
		t.Error("a tensor the adapter does not touch was copied")
	}
	if _, err := a.Merge(base[1:2]); err == nil || !strings.Contains(err.Error(), "has no model.layers.0.self_attn.o_proj.weight") {
		t.Errorf("merge onto a base without the adapted weight: %v", err)
	}
}

func TestBadConfigsAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		json, want string
	}{
		"rank 0":       {`{"peft_type":"LORA","r":0,"lora_alpha":8,"target_modules":["q_proj"]}`, "rank (r) 0"},
		"unknown":      {`{"peft_type":"LORA","r":8,"lora_alpha":8,"target_modules":["c_attn"]}`, `target "c_attn"`},
		"regex":        {`{"peft_type":"LORA","r":8,"lora_alpha":8,"target_modules":".*proj"}`, "regular expression"},
		"dora":         {`{"peft_type":"LORA","r":8,"lora_alpha":8,"target_modules":["q_proj"],"use_dora":true}`, "DoRA"},
		"bias":         {`{"peft_type":"LORA","r":8,"lora_alpha":8,"target_modules":["q_proj"],"bias":"all"}`, `bias "all"`},
		"not lora":     {`{"peft_type":"IA3","r":8,"lora_alpha":8,"target_modules":["q_proj"]}`, "only LORA"},
		"rank pattern": {`{"peft_type":"LORA","r":8,"lora_alpha":8,"target_modules":["q_proj"],"rank_pattern":{"q_proj":4}}`, "rank_pattern"},
	} {
		t.Run(name, func(t *testing.T) {
			var c Config
			err := json.Unmarshal([]byte(tc.json), &c)
			if err == nil {
				err = c.Check()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	var c Config
	if err := json.Unmarshal([]byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":"all-linear","rank_pattern":{},"alpha_pattern":{}}`), &c); err != nil || c.Check() != nil || len(c.TargetModules) != len(Targets) {
		t.Errorf("all-linear: %v %v %v", err, c.Check(), c.TargetModules)
	}
}

func TestReadTellsAModelFromAnAdapter(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "is a whole model") {
		t.Errorf("Read of a model directory: %v", err)
	}
	a := newTiny(t, []string{"q_proj"})
	a.Config.TargetModules = []string{"k_proj"}
	if err := Write(context.Background(), dir, a, checkpoint.BF16); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "does not name") {
		t.Errorf("Read of an adapter whose tensors its config does not name: %v", err)
	}
}
