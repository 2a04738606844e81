package records

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
)

// HeldoutKind is the kind of the records of held-out benchmark
// evaluations that `aipo train` writes every eval.every steps (the run
// configuration's eval.benchmarks, scored by the eval pipeline).
const HeldoutKind = "eval_benchmarks"

// BenchmarkEval is one evaluation of checkpoint Step of a run on its
// held-out benchmarks: the policy alone, n samples per problem.
type BenchmarkEval struct {
	Kind          string `json:"kind"` // HeldoutKind
	Step          int64  `json:"step"`
	PolicyVersion int64  `json:"policy_version"`
	// Dir holds the eval pipeline's records and report (report.json,
	// report.md) of the checkpoint.
	Dir        string         `json:"dir"`
	Benchmarks []HeldoutScore `json:"benchmarks"`
	Seconds    float64        `json:"seconds"`
}

// HeldoutScore is one benchmark's scores at one checkpoint.
type HeldoutScore struct {
	Name     string `json:"name"`
	Problems int    `json:"problems"`
	Samples  int    `json:"samples"`
	// Avg is Avg@n; Pass maps k (as text) to the unbiased Pass@k.
	Avg  float64            `json:"avg"`
	Pass map[string]float64 `json:"pass"`
	// Truncated is the share of responses cut at the token budget.
	Truncated float64 `json:"truncated"`
}

// PassAtN is Pass@n, n the benchmark's samples per problem (Avg when n is 1).
func (s HeldoutScore) PassAtN() float64 {
	if v, ok := s.Pass[fmt.Sprint(s.Samples)]; ok {
		return v
	}
	return s.Avg
}

// ReadHeldout reads the held-out evaluations of a run, in step order
// (none when the run evaluated no benchmark).
func ReadHeldout(ctx context.Context, runDir string) ([]BenchmarkEval, error) {
	files, err := storage.List(ctx, rundir.MetricsRecords(runDir, rundir.BenchmarkKind))
	if err != nil {
		return nil, err
	}
	var out []BenchmarkEval
	for _, f := range files {
		b, err := storage.ReadFile(ctx, f)
		if err != nil {
			return nil, err
		}
		var r BenchmarkEval
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&r); err != nil || r.Kind != HeldoutKind {
			return nil, fmt.Errorf("analyze: held-out evaluation %s: not a %s record (%v); remove it and run aipo train again to redo that evaluation", f, HeldoutKind, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}
