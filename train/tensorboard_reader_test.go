//go:build tensorboard

package train

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/demo"
	"github.com/aipo-rl/aipo/internal/testtools"
	"github.com/aipo-rl/aipo/pipelines/analytics"
)

// checkTensorBoard reads a run's event files with TensorBoard's own reader
// (scripts/pychecks/read_tensorboard.py in the scripts/pychecks.sh
// environment) and checks that every scalar of every metrics record is
// there once, at its step, equal as float32, and nothing else; and, from
// the records read here, the headline numbers by name. Each tag of series
// must hold steps 0 to n-1, n its value.
func checkTensorBoard(t *testing.T, runDir string, series map[string]int) {
	t.Helper()
	py := testtools.PyChecks(t)
	cmd := exec.Command(py, testtools.PyCheckScript("read_tensorboard.py"), TensorBoardDir(runDir))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read_tensorboard.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		TensorBoard string                  `json:"tensorboard"`
		Files       []string                `json:"files"`
		Scalars     map[string][][2]float64 `json:"scalars"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_tensorboard.py's output: %v\n%s", err, out)
	}
	t.Logf("TensorBoard %s read %d scalar series from %v", got.TensorBoard, len(got.Scalars), got.Files)
	seen := map[boardKey][]float32{}
	for tag, evs := range got.Scalars {
		for _, e := range evs {
			k := boardKey{int64(e[0]), tag}
			seen[k] = append(seen[k], float32(e[1]))
		}
	}
	want := expectedScalars(t, runDir)
	if len(want) == 0 {
		t.Fatal("the run has no metrics records")
	}
	for k, w := range want {
		if g := seen[k]; len(g) != 1 || g[0] != w {
			t.Errorf("TensorBoard: step %d %s: %v, want %v once", k.step, k.tag, g, w)
		}
	}
	for k, g := range seen {
		if _, ok := want[k]; !ok {
			t.Errorf("TensorBoard: step %d %s = %v is not in the run's records", k.step, k.tag, g)
		}
	}
	// The headline numbers, by name, from the records as the run wrote them.
	value := func(step int64, tag string) (float32, bool) {
		g := seen[boardKey{step, tag}]
		if len(g) != 1 {
			return 0, false
		}
		return g[0], true
	}
	expect := func(step int64, tag string, w float64) {
		t.Helper()
		if g, ok := value(step, tag); !ok || g != float32(w) {
			t.Errorf("TensorBoard: step %d %s = %v (found %v), the record says %v", step, tag, g, ok, float32(w))
		}
	}
	meta := func(m analytics.RolloutMeta, k string) float64 {
		v, err := strconv.ParseFloat(m[k], 64)
		if err != nil {
			t.Fatalf("rollout meta %s = %q", k, m[k])
		}
		return v
	}
	files, _ := filepath.Glob(filepath.Join(runDir, "metrics", "*.json"))
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch base := filepath.Base(f); {
		case strings.HasPrefix(base, "learn-"):
			var m LearnMetrics
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			kinds["learn"]++
			expect(m.Step, "train/loss", m.Loss)
			expect(m.Step, "train/lr", m.LR)
			expect(m.Step, "train/reward_mean", meta(m.Rollout, "reward_mean"))
			expect(m.Step, "train/accuracy", meta(m.Rollout, "accuracy"))
			expect(m.Step, "train/interactions_per_trajectory", meta(m.Rollout, "interactions_per_trajectory"))
			n := meta(m.Rollout, "trajectories")
			for _, a := range []string{"verify", "knowledge", "reason"} {
				c, _ := strconv.ParseFloat(m.Rollout["interactions."+a], 64)
				expect(m.Step, "interactions/"+a, c/n)
			}
			ext, _ := strconv.ParseFloat(m.Rollout["tokens.external"], 64)
			guide, _ := strconv.ParseFloat(m.Rollout["tokens.guide"], 64)
			expect(m.Step, "train/external_token_share", (ext+guide)/meta(m.Rollout, "tokens.response"))
			if m.Mismatch == nil {
				t.Errorf("learner step %d has no mismatch record", m.Step)
			} else {
				expect(m.Step, "mismatch/abs_mean", m.Mismatch.AbsMean)
				expect(m.Step, "mismatch/kl_k3", m.Mismatch.KLK3)
			}
			for name, v := range m.LossMetrics {
				expect(m.Step, "loss/"+name, v)
			}
		case strings.HasPrefix(base, "evalbench-"):
			var m analytics.BenchmarkEvalRecord
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			kinds["evalbench"]++
			for _, s := range m.Benchmarks {
				expect(m.Step, "benchmark/"+s.Name+"/avg", s.Avg)
				for k, v := range s.Pass {
					expect(m.Step, "benchmark/"+s.Name+"/pass@"+k, v)
				}
			}
		case strings.HasPrefix(base, "eval-"):
			var m demo.EvalRecord
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			kinds["eval"]++
			for _, s := range m.Splits {
				expect(m.Step, "eval/"+s.Split+"/greedy", s.Greedy)
				expect(m.Step, "eval/"+s.Split+"/avg_k", s.AvgK)
			}
		}
	}
	t.Logf("records checked by name: %v", kinds)
	for tag, n := range series {
		var steps []int64
		for _, e := range got.Scalars[tag] {
			steps = append(steps, int64(e[0]))
		}
		slices.Sort(steps)
		ok := len(steps) == n
		for i := 0; ok && i < n; i++ {
			ok = steps[i] == int64(i)
		}
		if !ok {
			t.Errorf("TensorBoard: %s has steps %v, want 0 to %d, each once", tag, steps, n-1)
		}
	}
}
