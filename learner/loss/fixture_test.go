package loss

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// The fixtures are made by scripts/loss_fixtures.py with PyTorch autograd
// in float64 from float32 inputs. Go also computes in float64 from the same
// float32 inputs, so the loss and metrics agree to rounding (differently
// ordered sums, libm vs Go exp): relative 1e-9 is generous. GradLogProb is
// returned as float32, so it carries one float32 rounding (relative 6e-8):
// we allow relative 1e-6 plus an absolute 1e-10 for entries that are zero
// or nearly so.
const (
	fixtureScalarRel = 1e-9
	fixtureScalarAbs = 1e-12
	fixtureGradRel   = 1e-6
	fixtureGradAbs   = 1e-10
)

type fixtureInputs struct {
	LogProb    []float32 `json:"log_prob"`
	OldLogProb []float32 `json:"old_log_prob"`
	RefLogProb []float32 `json:"ref_log_prob"`
	Behavior   []float32 `json:"behavior_log_prob"`
	Advantage  []float32 `json:"advantage"`
	Source     []uint8   `json:"source"`
	Seq        []int32   `json:"seq"`
	Entropy    []float32 `json:"entropy"`
}

func (f fixtureInputs) inputs() Inputs {
	src := make([]Source, len(f.Source))
	for i, s := range f.Source {
		src[i] = Source(s)
	}
	return Inputs{LogProb: f.LogProb, OldLogProb: f.OldLogProb, RefLogProb: f.RefLogProb, BehaviorLogProb: f.Behavior,
		Advantage: f.Advantage, Source: src, Seq: f.Seq, Entropy: f.Entropy}
}

type fixtureCase struct {
	Config  Config             `json:"config"`
	Loss    float64            `json:"loss"`
	Grad    []float64          `json:"grad"`
	Metrics map[string]float64 `json:"metrics"`
}

type fixtureFile struct {
	Inputs   fixtureInputs `json:"inputs"`
	Mismatch Mismatch      `json:"mismatch"`
	Cases    []fixtureCase `json:"cases"`
}

func loadFixtures(t testing.TB) map[string]fixtureFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "loss_*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures under testdata (err %v): run /usr/bin/python3 scripts/loss_fixtures.py", err)
	}
	out := map[string]fixtureFile{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f fixtureFile
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = f
	}
	return out
}

func caseName(c Config) string {
	name := fmt.Sprintf("%s/%s/%s/dual=%g/klext=%v/kl=%g/omega=%g", c.Base, c.External, c.Aggregation, c.DualClip, c.KLExternal, c.KLCoef, c.Omega)
	if r := c.RolloutCorrection; r.On() {
		name += fmt.Sprintf("/is=%s,%s,%g", r.Level, r.Mode, r.Cap)
	}
	return name
}

func closeTo(got, want, rel, abs float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)+abs
}

// compareOutput fails t naming the first differing quantity and the worst
// gradient difference.
func compareOutput(t *testing.T, what string, got Output, loss float64, grad []float64, metrics map[string]float64, rel, abs, grel, gabs float64) {
	t.Helper()
	if !closeTo(got.Loss, loss, rel, abs) {
		t.Errorf("%s: loss %.17g, want %.17g (diff %.3g)", what, got.Loss, loss, got.Loss-loss)
	}
	if len(got.GradLogProb) != len(grad) {
		t.Fatalf("%s: %d gradients, want %d", what, len(got.GradLogProb), len(grad))
	}
	worst, wi := 0.0, -1
	for i, g := range got.GradLogProb {
		d := math.Abs(float64(g) - grad[i])
		if d > grel*math.Abs(grad[i])+gabs && d > worst {
			worst, wi = d, i
		}
	}
	if wi >= 0 {
		t.Errorf("%s: GradLogProb[%d] = %.9g, want %.9g (worst difference %.3g beyond tolerance)", what, wi, got.GradLogProb[wi], grad[wi], worst)
	}
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got.Metrics[k]
		if !ok {
			t.Errorf("%s: metric %q missing", what, k)
			continue
		}
		if !closeTo(g, metrics[k], rel, abs) {
			t.Errorf("%s: metric %q = %.17g, want %.17g", what, k, g, metrics[k])
		}
	}
	for k := range got.Metrics {
		if _, ok := metrics[k]; !ok {
			t.Errorf("%s: metric %q not in the reference", what, k)
		}
	}
}

func TestPyTorchFixtures(t *testing.T) {
	files := loadFixtures(t)
	seen := map[string]bool{}
	for name, f := range files {
		in := f.Inputs.inputs()
		for _, c := range f.Cases {
			what := name + ":" + caseName(c.Config)
			seen[c.Config.Base+"/"+c.Config.External+"/"+c.Config.Aggregation] = true
			if r := c.Config.RolloutCorrection; r.On() {
				seen[c.Config.Base+"/is="+r.Level+"/"+r.Mode] = true
			}
			got, err := Compute(c.Config, in)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			compareOutput(t, what, got, c.Loss, c.Grad, c.Metrics, fixtureScalarRel, fixtureScalarAbs, fixtureGradRel, fixtureGradAbs)
			ref := computeLoop(c.Config, in, in.LogProb)
			compareOutput(t, what+" (loop form)", ref, c.Loss, c.Grad, c.Metrics, fixtureScalarRel, fixtureScalarAbs, fixtureGradRel, fixtureGradAbs)
		}
	}
	// Every supported combination must have a fixture.
	for _, b := range allBases {
		for _, e := range allExternals {
			for _, a := range allAggs {
				if !seen[b+"/"+e+"/"+a] {
					t.Errorf("no PyTorch fixture for %s/%s/%s: regenerate with /usr/bin/python3 scripts/loss_fixtures.py", b, e, a)
				}
			}
		}
		for _, l := range []string{CorrectionToken, CorrectionSequence, CorrectionGeometric} {
			for _, m := range []string{CorrectionTruncate, CorrectionMask} {
				if !seen[b+"/is="+l+"/"+m] {
					t.Errorf("no PyTorch fixture for %s with rollout correction %s/%s: regenerate with /usr/bin/python3 scripts/loss_fixtures.py", b, l, m)
				}
			}
		}
	}
}

// TestMismatchFixture holds MeasureMismatch to the fixtures' measurement
// (PyTorch in float64 from the same float32 inputs: the sums agree to
// rounding, and the max and counts exactly).
func TestMismatchFixture(t *testing.T) {
	for name, f := range loadFixtures(t) {
		in := f.Inputs.inputs()
		got := MeasureMismatch(in.OldLogProb, in.BehaviorLogProb, in.Source, in.Seq)
		want := f.Mismatch
		if want.Tokens == 0 {
			t.Fatalf("%s has no mismatch measurement: regenerate with /usr/bin/python3 scripts/loss_fixtures.py", name)
		}
		if got.Tokens != want.Tokens || got.Sequences != want.Sequences || got.AbsMax != want.AbsMax {
			t.Errorf("%s: tokens %d, sequences %d, abs max %.17g; want %d, %d, %.17g", name, got.Tokens, got.Sequences, got.AbsMax, want.Tokens, want.Sequences, want.AbsMax)
		}
		for _, q := range []struct {
			what      string
			got, want float64
		}{{"abs_mean", got.AbsMean, want.AbsMean}, {"kl", got.KL, want.KL}, {"kl_k3", got.KLK3, want.KLK3}} {
			if !closeTo(q.got, q.want, fixtureScalarRel, fixtureScalarAbs) {
				t.Errorf("%s: %s = %.17g, want %.17g", name, q.what, q.got, q.want)
			}
		}
	}
}

func TestOverlongPenaltyFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "overlong.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			Length  int     `json:"length"`
			MaxLen  int     `json:"max_len"`
			Cache   int     `json:"cache"`
			Penalty float32 `json:"penalty"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("overlong.json has no cases")
	}
	for _, c := range f.Cases {
		// Both sides round one float64 quotient to float32.
		if got := OverlongPenalty(c.Length, c.MaxLen, c.Cache); got != c.Penalty {
			t.Errorf("OverlongPenalty(%d, %d, %d) = %v, want %v", c.Length, c.MaxLen, c.Cache, got, c.Penalty)
		}
	}
}
