package advantage

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func checkVec(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d advantages, want %d", name, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !near(float64(got[i]), want[i], tol) && d > worst {
			worst, at = d, i
		}
	}
	if at >= 0 {
		t.Errorf("%s: element %d = %v, want %v (worst difference %.3g; got %v want %v)", name, at, got[at], want[at], worst, got, want)
	}
}

// Hand-computed values.
func TestHandComputed(t *testing.T) {
	// Rewards 1, 0, 0, 1: mean 0.5, sample std sqrt(1/3) = 0.57735,
	// population std 0.5.
	r := []float32{1, 0, 0, 1}
	s := math.Sqrt(1.0 / 3)
	cases := []struct {
		cfg  Config
		want []float64
	}{
		{Config{}, []float64{0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.5 / (s + 1e-6)}},
		{Config{Method: "GRPO", PopulationStd: true}, []float64{0.5 / 0.500001, -0.5 / 0.500001, -0.5 / 0.500001, 0.5 / 0.500001}},
		{Config{Method: "dr_grpo"}, []float64{0.5, -0.5, -0.5, 0.5}},
		// RLOO: 1 - mean(0,0,1) = 2/3; 0 - mean(1,0,1) = -2/3.
		{Config{Method: "rloo"}, []float64{2.0 / 3, -2.0 / 3, -2.0 / 3, 2.0 / 3}},
	}
	for _, c := range cases {
		got, err := c.cfg.Advantages(r)
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		checkVec(t, c.cfg.Method, got, c.want, 1e-6)
	}
	// One success in eight: mean 1/8, sample std sqrt(1/8) = 0.353553.
	got, err := Compute("grpo", []float32{0, 0, 0, 0, 0, 0, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	sd := math.Sqrt(1.0 / 8)
	w0, w7 := -0.125/(sd+1e-6), 0.875/(sd+1e-6)
	checkVec(t, "one-in-eight", got, []float64{w0, w0, w0, w0, w0, w0, w0, w7}, 1e-6)
	if math.Abs(float64(got[7])-2.4748) > 1e-3 {
		t.Errorf("one-in-eight success advantage %v, want about 2.4748", got[7])
	}
}

type fixtures struct {
	Eps    float64 `json:"eps"`
	Groups []struct {
		Rewards []float32 `json:"rewards"`
		GRPO    []float64 `json:"grpo"`
		GRPOPop []float64 `json:"grpo_population_std"`
		DrGRPO  []float64 `json:"drgrpo"`
		RLOO    []float64 `json:"rloo"`
	} `json:"groups"`
	Overlong []struct {
		Length  int     `json:"length"`
		MaxLen  int     `json:"max_len"`
		Cache   int     `json:"cache"`
		Penalty float64 `json:"penalty"`
	} `json:"overlong"`
}

// TestTorchFixtures compares with values computed by PyTorch in float64
// (scripts/advantage_fixtures.py). This package also computes in float64 and
// rounds the result to float32, so values agree to float32 rounding:
// relative 1e-6 (of 1 + |value|).
func TestTorchFixtures(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "fixtures.json"))
	if err != nil {
		t.Fatalf("read fixtures (regenerate with /usr/bin/python3 scripts/advantage_fixtures.py): %v", err)
	}
	var fx fixtures
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatalf("parse fixtures: %v", err)
	}
	if fx.Eps != DefaultEpsilon || len(fx.Groups) < 10 || len(fx.Overlong) < 20 {
		t.Fatalf("fixtures look wrong: eps %v, %d groups, %d overlong cases", fx.Eps, len(fx.Groups), len(fx.Overlong))
	}
	const tol = 1e-6
	for gi, g := range fx.Groups {
		for _, m := range []struct {
			cfg  Config
			want []float64
		}{
			{Config{Method: GRPO}, g.GRPO},
			{Config{Method: GRPO, PopulationStd: true}, g.GRPOPop},
			{Config{Method: DrGRPO}, g.DrGRPO},
			{Config{Method: RLOO}, g.RLOO},
		} {
			got, err := m.cfg.Advantages(g.Rewards)
			if err != nil {
				t.Fatalf("group %d %s: %v", gi, m.cfg.Method, err)
			}
			name := m.cfg.Method
			if m.cfg.PopulationStd {
				name += " population std"
			}
			checkVec(t, fmt.Sprintf("group %d %s", gi, name), got, m.want, tol)
		}
	}
	for _, o := range fx.Overlong {
		got := OverlongPenalty(o.Length, o.MaxLen, o.Cache)
		if !near(float64(got), o.Penalty, 1e-6) {
			t.Errorf("OverlongPenalty(%d, %d, %d) = %v, want %v", o.Length, o.MaxLen, o.Cache, got, o.Penalty)
		}
	}
}

// Properties: zero mean (all methods), unit sample std for GRPO, scale and
// shift invariance for GRPO, all-equal groups give zeros.
func TestProperties(t *testing.T) {
	groups := [][]float32{{1, 0}, {0.3, 0.9, -0.2}, {1, 1, 0, 0, 0, 1, 0, 1}, {5, 2, 9, 4, 4, 7}, {-1, 0.5, 0.25, 0.125}}
	for _, g := range groups {
		for _, m := range Methods() {
			a, err := Compute(m, g)
			if err != nil {
				t.Fatal(err)
			}
			sum := 0.0
			for _, v := range a {
				sum += float64(v)
			}
			if math.Abs(sum) > 1e-5*float64(len(a)) {
				t.Errorf("%s %v: advantages %v sum to %v, want 0", m, g, a, sum)
			}
		}
		a, _ := Compute(GRPO, g)
		ss := 0.0
		for _, v := range a {
			ss += float64(v) * float64(v)
		}
		if sd := math.Sqrt(ss / float64(len(a)-1)); math.Abs(sd-1) > 1e-4 {
			t.Errorf("GRPO %v: sample std of advantages %v, want 1", g, sd)
		}
		scaled := make([]float32, len(g))
		for i, r := range g {
			scaled[i] = 3*r + 7
		}
		b, _ := Compute(GRPO, scaled)
		want := make([]float64, len(a))
		for i := range a {
			want[i] = float64(a[i])
		}
		checkVec(t, "GRPO scale and shift invariance", b, want, 1e-4)
	}
	for _, g := range [][]float32{{1, 1, 1, 1}, {0, 0}, {0.7}, {-2, -2, -2}} {
		for _, m := range Methods() {
			a, err := Compute(m, g)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range a {
				if v != 0 {
					t.Errorf("%s on all-equal %v: advantage %d = %v, want 0", m, g, i, v)
				}
			}
		}
		if !AllEqual(g) {
			t.Errorf("AllEqual(%v) = false", g)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := Compute("ppo", []float32{1, 0}); err == nil || !strings.Contains(err.Error(), "ppo") || !strings.Contains(err.Error(), "drgrpo") {
		t.Errorf("unknown method error does not name it and the known ones: %v", err)
	}
	if _, err := Compute(GRPO, nil); err != ErrEmptyGroup {
		t.Errorf("empty group: %v, want ErrEmptyGroup", err)
	}
	if _, err := Compute(GRPO, []float32{1, float32(math.NaN())}); err == nil || !strings.Contains(err.Error(), "reward 1") {
		t.Errorf("NaN reward error does not name it: %v", err)
	}
	bad := []Config{
		{Method: "x"},
		{Epsilon: -1},
		{Overlong: Overlong{Enabled: true}},
		{Overlong: Overlong{Enabled: true, MaxLength: 10, Cache: 11}},
		{Overlong: Overlong{Enabled: true, MaxLength: 10, Cache: 2, Factor: -1}},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted a bad config", c)
		}
	}
	if err := (Config{Method: "dr.grpo", Overlong: Overlong{Enabled: true, MaxLength: 10, Cache: 2}}).Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}

func TestDynamicSampling(t *testing.T) {
	var f GroupFilter
	groups := [][]float32{{1, 1, 1}, {0, 1, 0}, {0, 0, 0, 0}, {0.5, 0.5}, {1, 0}}
	var kept []int
	for i, g := range groups {
		if f.Keep(g) {
			kept = append(kept, i)
		}
	}
	if len(kept) != 2 || kept[0] != 1 || kept[1] != 4 || f.Kept != 2 || f.Dropped != 3 {
		t.Errorf("kept %v with counts %+v, want groups [1 4] kept and 3 dropped", kept, f)
	}
	if r := f.DropRate(); math.Abs(r-0.6) > 1e-12 {
		t.Errorf("drop rate %v, want 0.6", r)
	}
	var g GroupFilter
	g.Keep([]float32{1, 0})
	f.Merge(g)
	if f.Kept != 3 || f.Dropped != 3 {
		t.Errorf("merged counts %+v, want 3 kept 3 dropped", f)
	}
	if (GroupFilter{}).DropRate() != 0 {
		t.Error("empty filter drop rate is not 0")
	}
}

func TestOverlong(t *testing.T) {
	cases := []struct {
		length, maxLen, cache int
		want                  float32
	}{
		{100, 1000, 200, 0},
		{800, 1000, 200, 0},
		{900, 1000, 200, -0.5},
		{1000, 1000, 200, -1},
		{1001, 1000, 200, -1},
		{5000, 1000, 200, -1},
		{1000, 1000, 0, 0},
		{1001, 1000, 0, -1},
		{10, 0, 5, 0},
	}
	for _, c := range cases {
		if got := OverlongPenalty(c.length, c.maxLen, c.cache); math.Abs(float64(got-c.want)) > 1e-7 {
			t.Errorf("OverlongPenalty(%d, %d, %d) = %v, want %v", c.length, c.maxLen, c.cache, got, c.want)
		}
	}
	cfg := Config{Overlong: Overlong{Enabled: true, MaxLength: 1000, Cache: 200, Factor: 0.5}}
	if got := cfg.Shape(1, 900); math.Abs(float64(got)-0.75) > 1e-7 {
		t.Errorf("Shape(1, 900) = %v, want 0.75", got)
	}
	if got := (Config{}).Shape(1, 5000); got != 1 {
		t.Errorf("Shape without overlong shaping changed the reward to %v", got)
	}
}

func TestConfigYAML(t *testing.T) {
	src := "method: drgrpo\nepsilon: 1e-5\npopulation_std: true\ndynamic_sampling: true\noverlong:\n  enabled: true\n  max_length: 4096\n  cache: 512\n  factor: 1\n"
	var c Config
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	want := Config{Method: "drgrpo", Epsilon: 1e-5, PopulationStd: true, DynamicSampling: true,
		Overlong: Overlong{Enabled: true, MaxLength: 4096, Cache: 512, Factor: 1}}
	if c != want {
		t.Errorf("decoded %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
