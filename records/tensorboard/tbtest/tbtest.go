// Package tbtest checks a run's TensorBoard event files against its
// records, for the tests of the writer and of the runs that write them.
package tbtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/tfevents"
	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/records/tensorboard"
)

// Key is one scalar of an event file: its step and tag.
type Key struct {
	Step int64
	Tag  string
}

// EventFiles reads every event file of a run's tensorboard/ (local or
// gs://) with the package's reader: each (step, tag) and its values, one
// per occurrence.
func EventFiles(t testing.TB, runDir string) (files []string, seen map[Key][]float32) {
	t.Helper()
	ctx := context.Background()
	files, err := storage.List(ctx, storage.Join(rundir.TensorBoard(runDir), "events.out.tfevents.*"))
	if err != nil {
		t.Fatal(err)
	}
	seen = map[Key][]float32{}
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := tfevents.Read(b)
		if err != nil && !errors.Is(err, tfevents.ErrTruncated) {
			t.Fatalf("%s: %v", f, err)
		}
		if len(ev) == 0 || ev[0].FileVersion != tfevents.FileVersion {
			t.Fatalf("%s does not start with the file version event", f)
		}
		for _, e := range ev {
			for _, s := range e.Scalars {
				k := Key{e.Step, s.Tag}
				seen[k] = append(seen[k], s.Value)
			}
		}
	}
	return files, seen
}

// ExpectedScalars is RecordScalars of every metrics file of a run.
func ExpectedScalars(t testing.TB, runDir string) map[Key]float32 {
	t.Helper()
	ctx := context.Background()
	files, err := storage.List(ctx, storage.Join(runDir, "metrics", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[Key]float32{}
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		step, vals, err := tensorboard.RecordScalars(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range vals {
			want[Key{step, v.Tag}] = v.Value
		}
	}
	return want
}

// CheckEventsOnce checks that the run's event files hold every scalar of
// its metrics records once, and nothing else (read with tfevents.Read:
// on gs:// too).
func CheckEventsOnce(t testing.TB, runDir, when string) {
	t.Helper()
	want := ExpectedScalars(t, runDir)
	if len(want) == 0 {
		t.Fatalf("%s: the run has no metrics records", when)
	}
	_, seen := EventFiles(t, runDir)
	checkOnce(t, when, want, seen)
}

// checkOnce reports every scalar of want that seen does not hold exactly
// once with its value, and every one seen that want lacks.
func checkOnce(t testing.TB, where string, want map[Key]float32, seen map[Key][]float32) {
	t.Helper()
	for k, w := range want {
		if g := seen[k]; len(g) != 1 || g[0] != w {
			t.Errorf("%s: step %d %s: %v, want %v once", where, k.Step, k.Tag, g, w)
		}
	}
	for k, g := range seen {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: step %d %s = %v is not in the run's records", where, k.Step, k.Tag, g)
		}
	}
}

// check checks seen, a run's scalars as a reader found them, against the
// run's records: every scalar once, nothing else, the headline numbers by
// name, and each tag of series holding steps 0 to n-1, n its value.
func check(t testing.TB, runDir, reader string, seen map[Key][]float32, series map[string]int) {
	t.Helper()
	want := ExpectedScalars(t, runDir)
	if len(want) == 0 {
		t.Fatal("the run has no metrics records")
	}
	checkOnce(t, reader, want, seen)
	checkHeadlines(t, reader, runDir, seen)
	for tag, n := range series {
		var steps []int64
		for k, vs := range seen {
			if k.Tag == tag {
				for range vs {
					steps = append(steps, k.Step)
				}
			}
		}
		slices.Sort(steps)
		ok := len(steps) == n
		for i := 0; ok && i < n; i++ {
			ok = steps[i] == int64(i)
		}
		if !ok {
			t.Errorf("%s: %s has steps %v, want 0 to %d, each once", reader, tag, steps, n-1)
		}
	}
}

// headlines checks scalars by name against the records the run wrote.
type headlines struct {
	t      testing.TB
	reader string
	seen   map[Key][]float32
}

// expect checks that tag holds w at step, once.
func (h headlines) expect(step int64, tag string, w float64) {
	h.t.Helper()
	g := h.seen[Key{step, tag}]
	if len(g) != 1 || g[0] != float32(w) {
		h.t.Errorf("%s: step %d %s = %v, the record says %v", h.reader, step, tag, g, float32(w))
	}
}

// meta is the rollout meta value k as a number.
func (h headlines) meta(m records.RolloutMeta, k string) float64 {
	v, err := strconv.ParseFloat(m[k], 64)
	if err != nil {
		h.t.Fatalf("rollout meta %s = %q", k, m[k])
	}
	return v
}

// checkHeadlines checks the headline numbers, by name, from the records
// as the run wrote them.
func checkHeadlines(t testing.TB, reader, runDir string, seen map[Key][]float32) {
	t.Helper()
	h := headlines{t: t, reader: reader, seen: seen}
	files, _ := filepath.Glob(filepath.Join(runDir, "metrics", "*.json"))
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		decode := func(v any) {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		switch base := filepath.Base(f); {
		case strings.HasPrefix(base, "learn-"):
			var m records.Learn
			decode(&m)
			kinds["learn"]++
			h.learn(m)
		case strings.HasPrefix(base, "evalbench-"):
			var m records.BenchmarkEval
			decode(&m)
			kinds["evalbench"]++
			for _, s := range m.Benchmarks {
				h.expect(m.Step, "benchmark/"+s.Name+"/avg", s.Avg)
				for k, v := range s.Pass {
					h.expect(m.Step, "benchmark/"+s.Name+"/pass@"+k, v)
				}
			}
		case strings.HasPrefix(base, "eval-"):
			var m records.Eval
			decode(&m)
			kinds["eval"]++
			for _, s := range m.Splits {
				h.expect(m.Step, "eval/"+s.Split+"/greedy", s.Greedy)
				h.expect(m.Step, "eval/"+s.Split+"/avg_k", s.AvgK)
			}
		}
	}
	t.Logf("records checked by name: %v", kinds)
}

// learn checks a learner record's headline scalars.
func (h headlines) learn(m records.Learn) {
	h.t.Helper()
	h.expect(m.Step, "train/loss", m.Loss)
	h.expect(m.Step, "train/lr", m.LR)
	h.expect(m.Step, "train/reward_mean", h.meta(m.Rollout, "reward_mean"))
	h.expect(m.Step, "train/accuracy", h.meta(m.Rollout, "accuracy"))
	h.expect(m.Step, "train/interactions_per_trajectory", h.meta(m.Rollout, "interactions_per_trajectory"))
	n := h.meta(m.Rollout, "trajectories")
	for _, a := range []string{"verify", "knowledge", "reason"} {
		c, _ := strconv.ParseFloat(m.Rollout["interactions."+a], 64)
		h.expect(m.Step, "interactions/"+a, c/n)
	}
	ext, _ := strconv.ParseFloat(m.Rollout["tokens.external"], 64)
	guide, _ := strconv.ParseFloat(m.Rollout["tokens.guide"], 64)
	h.expect(m.Step, "train/external_token_share", (ext+guide)/h.meta(m.Rollout, "tokens.response"))
	if m.Mismatch == nil {
		h.t.Errorf("learner step %d has no mismatch record", m.Step)
	} else {
		h.expect(m.Step, "mismatch/abs_mean", m.Mismatch.AbsMean)
		h.expect(m.Step, "mismatch/kl_k3", m.Mismatch.KLK3)
	}
	for name, v := range m.LossMetrics {
		h.expect(m.Step, "loss/"+name, v)
	}
}
