// Package tensorboard writes a run's records (the learner's, the demo
// task's and the benchmarks' evaluations) as TensorBoard scalars under
// <run>/tensorboard, each (step, tag) once across processes and resumes.
package tensorboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/internal/tfevents"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/records"
)

// boardFiles numbers the event files this process starts, so that two
// runs of one process in the same second get files of their own.
var boardFiles atomic.Int64

// Board writes a run's per-step metrics as TensorBoard scalars. Its
// source is the run's metrics/*.json (the learner's records, the demo
// task's and the benchmarks' evaluations), so what TensorBoard shows is
// what metrics.jsonl holds. Each process appends to an event file of its
// own, and writes only the (step, tag) pairs that no event file of the
// directory holds yet: a resumed run neither repeats a step nor loses one
// (a step whose record was committed just before a kill, but not its
// events, is written by the next process).
type Board struct {
	dir  string
	run  string
	logf func(string)

	scanned bool
	written map[boardKey]bool
	done    map[string]bool // metrics files whose every scalar is written

	file   string // this process's event file; "" until the first write
	remote []byte // on gs://: the whole of this process's file
	warned bool
}

type boardKey struct {
	step int64
	tag  string
}

// Open is the board of the run in runDir. A nil *Board (a run with
// run.tensorboard false) writes nothing.
func Open(runDir string, logf func(string)) *Board {
	return &Board{dir: rundir.TensorBoard(runDir), run: runDir, logf: logf,
		written: map[boardKey]bool{}, done: map[string]bool{}}
}

// Sync writes the scalars of the run's metrics records that no event
// file holds yet. A failure is reported once, through logf, and does not
// stop the run: the next sync writes what this one could not.
func (b *Board) Sync(ctx context.Context) {
	if b == nil {
		return
	}
	if err := b.write(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		if !b.warned && b.logf != nil {
			b.logf(fmt.Sprintf("tensorboard: %v; training goes on, and what was not written is written after the next step", err))
		}
		b.warned = true
	}
}

// pending is a metrics record's scalars that no event file holds yet.
type pending struct {
	file string
	step int64
	vals []tfevents.Scalar
}

// write appends the scalars of the run's records that no event file holds
// to this process's event file (started when there is a first one).
func (b *Board) write(ctx context.Context) error {
	if !b.scanned {
		if err := b.scan(ctx); err != nil {
			return err
		}
		b.scanned = true
	}
	todo, err := b.pending(ctx)
	if err != nil {
		return err
	}
	var out []byte
	now := time.Now()
	if b.file == "" {
		some := false
		for _, p := range todo {
			some = some || len(p.vals) > 0
		}
		if !some {
			for _, p := range todo {
				b.done[p.file] = true
			}
			return nil
		}
		n := int(boardFiles.Add(1)) - 1
		b.file = storage.Join(b.dir, tfevents.FileName(now, tfevents.Hostname(), os.Getpid(), n))
		out = tfevents.AppendFileVersion(out, now)
	}
	// One event per record, in step order; records of one step keep the
	// order of their files (eval, evalbench, learn).
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].step < todo[j].step })
	for _, p := range todo {
		if len(p.vals) > 0 {
			out = tfevents.AppendScalars(out, now, p.step, p.vals)
		}
	}
	if len(out) > 0 {
		if err := b.append(ctx, out); err != nil {
			// A local file may now end in a partial record, or hold all of
			// it: the next sync starts another file and first reads again
			// what the directory holds.
			b.file, b.remote = "", nil
			b.scanned, b.written = false, map[boardKey]bool{}
			return err
		}
	}
	for _, p := range todo {
		for _, v := range p.vals {
			b.written[boardKey{p.step, v.Tag}] = true
		}
		b.done[p.file] = true
	}
	return nil
}

// pending reads the records not yet done and keeps, of each, the scalars
// no event file holds. A learner record is written just before its
// checkpoint is committed; one whose checkpoint is not (a killed
// attempt's) waits: it is written again when the step is learned again.
func (b *Board) pending(ctx context.Context) ([]pending, error) {
	files, err := storage.List(ctx, rundir.MetricsRecords(b.run, ""))
	if err != nil {
		return nil, err
	}
	var todo []pending
	latest := int64(-2) // the newest committed checkpoint; -2: not looked up yet
	for _, f := range files {
		if b.done[f] {
			continue
		}
		raw, err := storage.ReadFile(ctx, f)
		if err != nil {
			return nil, err
		}
		kind, step, vals, err := recordScalars(raw)
		if err != nil {
			return nil, fmt.Errorf("metrics file %s: %w", f, err)
		}
		if kind == "learn" {
			if latest == -2 {
				if latest, err = newestCheckpoint(ctx, b.run); err != nil {
					return nil, err
				}
			}
			if step >= latest {
				continue
			}
		}
		var left []tfevents.Scalar
		for _, v := range vals {
			if !b.written[boardKey{step, v.Tag}] {
				left = append(left, v)
			}
		}
		todo = append(todo, pending{f, step, left})
	}
	return todo, nil
}

// newestCheckpoint is the step of the run's newest committed checkpoint,
// -1 when it has none.
func newestCheckpoint(ctx context.Context, run string) (int64, error) {
	steps, err := checkpoint.List(ctx, run)
	if err != nil || len(steps) == 0 {
		return -1, err
	}
	return steps[len(steps)-1], nil
}

// append adds data to this process's event file: appended in place on a
// local disk (so that a TensorBoard reading the file sees each step as it
// lands), rewritten whole on gs://, whose objects cannot be appended to.
func (b *Board) append(ctx context.Context, data []byte) error {
	if storage.IsRemote(b.file) {
		all := append(append([]byte(nil), b.remote...), data...)
		if err := storage.WriteAtomic(ctx, b.file, all); err != nil {
			return err
		}
		b.remote = all
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(b.file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(b.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	storage.Changed(b.file)
	return nil
}

// scan notes the (step, tag) pairs the directory's event files hold, up to
// the first record of each that cannot be read (a partial record a killed
// writer left: what follows it is written again).
func (b *Board) scan(ctx context.Context) error {
	files, err := storage.List(ctx, storage.Join(b.dir, "*"+tfevents.Marker+"*"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if !tfevents.IsEventFile(storage.Base(f)) {
			continue
		}
		raw, err := storage.ReadFile(ctx, f)
		if err != nil {
			return err
		}
		events, err := tfevents.Read(raw)
		if err != nil && !errors.Is(err, tfevents.ErrTruncated) && b.logf != nil {
			b.logf(fmt.Sprintf("tensorboard: %s: %v; the scalars after it are written again", f, err))
		}
		for _, e := range events {
			for _, s := range e.Scalars {
				b.written[boardKey{e.Step, s.Tag}] = true
			}
		}
	}
	return nil
}

// RecordScalars is the TensorBoard scalars of one metrics record (a line
// of metrics.jsonl, a file of metrics/) and the step they are written at.
// A learner record (metrics/learn-K.json, step K: the update on step K's
// trajectories) gives
//
//	train/loss, train/lr, train/grad_norm        the update
//	train/reward_mean, train/accuracy            the rollout manifest's
//	train/interactions_per_trajectory            the rollout manifest's
//	train/external_token_share                   (tokens.external + tokens.guide) / tokens.response
//	interactions/AGENT                           interactions.AGENT / trajectories, for verify, knowledge, reason and any other agent
//	mismatch/abs_mean, abs_max, kl, kl_k3        the train-inference mismatch, when measured
//	loss/NAME                                    each of loss_metrics
//	learner/tokens, learner/skipped, learner/seconds
//	rollout/KEY                                  every other number of the rollout manifest but the step's settings
//
// an evaluation of the demo task (metrics/eval-K.json, step K: checkpoint
// K) gives eval/SPLIT/greedy, avg_k, pass_k, call_rate and stderr_avg, and
// one of eval.benchmarks (metrics/evalbench-K.json, checkpoint K) gives
// benchmark/NAME/avg, benchmark/NAME/pass@K for each k, and
// benchmark/NAME/truncated. Records of another kind give none. The values
// are the records' own, rounded to float32; tags are sorted.
func RecordScalars(raw []byte) (int64, []tfevents.Scalar, error) {
	_, step, vals, err := recordScalars(raw)
	return step, vals, err
}

// recordScalars is RecordScalars with the record's kind.
func recordScalars(raw []byte) (string, int64, []tfevents.Scalar, error) {
	var head struct {
		Kind string `json:"kind"`
		Step int64  `json:"step"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", 0, nil, err
	}
	vals := map[string]float64{}
	switch head.Kind {
	case "learn":
		var m records.Learn
		if err := json.Unmarshal(raw, &m); err != nil {
			return "", 0, nil, err
		}
		learnScalars(m, vals)
	case "eval":
		var m records.Eval
		if err := json.Unmarshal(raw, &m); err != nil {
			return "", 0, nil, err
		}
		for _, s := range m.Splits {
			p := "eval/" + s.Split + "/"
			vals[p+"greedy"], vals[p+"avg_k"], vals[p+"pass_k"] = s.Greedy, s.AvgK, s.PassK
			vals[p+"call_rate"], vals[p+"stderr_avg"] = s.CallRate, s.StdErrAvg
		}
	case records.HeldoutKind:
		var m records.BenchmarkEval
		if err := json.Unmarshal(raw, &m); err != nil {
			return "", 0, nil, err
		}
		for _, s := range m.Benchmarks {
			p := "benchmark/" + s.Name + "/"
			vals[p+"avg"], vals[p+"truncated"] = s.Avg, s.Truncated
			for k, v := range s.Pass {
				vals[p+"pass@"+k] = v
			}
		}
	}
	out := make([]tfevents.Scalar, 0, len(vals))
	for t, v := range vals {
		out = append(out, tfevents.Scalar{Tag: t, Value: float32(v)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return head.Kind, head.Step, out, nil
}

// boardSettings are rollout manifest numbers that are the step's
// settings, not measurements: left out of TensorBoard.
var boardSettings = map[string]bool{"seed": true, "group_size": true, "max_interactions": true,
	"interaction_cost": true, "answer_token_budget": true}

// boardAgents are the agents whose interactions TensorBoard always shows
// (0 in a step without their calls, so that each series has every step).
var boardAgents = []string{"verify", "knowledge", "reason"}

func learnScalars(m records.Learn, vals map[string]float64) {
	vals["train/loss"], vals["train/lr"], vals["train/grad_norm"] = m.Loss, m.LR, m.GradNorm
	vals["learner/tokens"], vals["learner/skipped"], vals["learner/seconds"] = float64(m.Tokens), float64(m.Skipped), m.Seconds
	for k, v := range m.LossMetrics {
		vals["loss/"+k] = v
	}
	if mm := m.Mismatch; mm != nil {
		vals["mismatch/abs_mean"], vals["mismatch/abs_max"] = mm.AbsMean, mm.AbsMax
		vals["mismatch/kl"], vals["mismatch/kl_k3"] = mm.KL, mm.KLK3
	}
	if sl := m.Staleness; sl != nil {
		vals["staleness/mean_lag"], vals["staleness/max_lag"] = sl.MeanLag, float64(sl.MaxLag)
		vals["staleness/mixed_samples"] = float64(sl.Mixed)
		total := 0
		for _, n := range sl.Tokens {
			total += n
		}
		for lag, n := range sl.Tokens {
			if total > 0 {
				vals["staleness/token_share_lag_"+lag] = float64(n) / float64(total)
			}
		}
		for lag, mm := range sl.MismatchByLag {
			vals["mismatch_by_lag/"+lag+"/abs_mean"], vals["mismatch_by_lag/"+lag+"/kl_k3"] = mm.AbsMean, mm.KLK3
		}
	}
	num := map[string]float64{}
	for k, s := range m.Rollout {
		if records.TextMeta(k) || boardSettings[k] {
			continue
		}
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			num[k] = v
		}
	}
	headline := map[string]string{"reward_mean": "train/reward_mean", "accuracy": "train/accuracy",
		"interactions_per_trajectory": "train/interactions_per_trajectory"}
	for k, v := range num {
		if t, ok := headline[k]; ok {
			vals[t] = v
		} else {
			vals["rollout/"+k] = v
		}
	}
	st, err := records.ReadStepStats(m.Rollout)
	if err != nil {
		return // a record whose rollout statistics do not read: its numbers above only
	}
	if resp := float64(st.ResponseTokens); resp > 0 {
		vals["train/external_token_share"] = float64(st.ExternalTokens+st.GuideTokens) / resp
	}
	if n := float64(st.Trajectories); n > 0 {
		for _, a := range boardAgents {
			vals["interactions/"+a] = float64(st.AgentInteractions[a]) / n
		}
		for a, v := range st.AgentInteractions {
			vals["interactions/"+a] = float64(v) / n
		}
	}
}
