// Command memorybench measures the host memory of a learner step (aipo
// learn) of two builds side by side, and the time activation checkpointing
// costs: for each model size it writes a run directory (a random Qwen2-
// shaped checkpoint 0 and one step of trajectories), runs `aipo learn` of
// each build on copies of it as child processes, and reads each child's
// peak resident set (getrusage). scripts/memory-bench.sh builds the two
// binaries (the tree before this memory work and the working tree) and
// runs it; it writes the table it prints to -out.
//
// What is measured, per size and build:
//
//   - the peak RSS of `aipo learn` over one 2,048-token sequence (long)
//     and over one 64-token sequence (short), the loss with a KL term so
//     that the reference model is held;
//   - host bytes per parameter: (short peak - the peak of the same step on
//     a 1-layer, 64-wide model, the process's fixed cost) / parameters;
//   - activation bytes per token per layer: (long peak - short peak) /
//     (token difference x layers);
//   - with the working tree, the long step with activation checkpointing
//     on and off, its seconds, and the planner's prediction
//     (trainer.PlanStep) beside the measured peak above the fixed cost.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/meminfo"
	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/schemas"
)

type size struct {
	name string
	cfg  model.Config
}

// qwen2 is a Qwen2-shaped configuration: 64-wide heads, a 32,000-token
// vocabulary, tied embeddings.
func qwen2(C, F, L, kv int) model.Config {
	return model.Config{ModelType: "qwen2", HiddenSize: C, IntermediateSize: F, NumHiddenLayers: L, NumAttentionHeads: C / 64,
		NumKeyValueHeads: kv, VocabSize: vocab, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, HiddenAct: "silu"}
}

// vocab is the sizes' vocabulary; the fixed-cost model's is baseVocab.
const (
	vocab     = 32000
	baseVocab = 256
)

var sizes = []size{
	{"25M", qwen2(256, 1024, 16, 1)},
	{"100M", qwen2(512, 2048, 20, 2)},
	{"300M", qwen2(1024, 2816, 24, 4)},
}

// baseline is the model whose step measures the process's fixed cost: a
// 1-layer, 64-wide model of a 256-token vocabulary (about 50K parameters,
// 1 MB at 20 bytes a parameter).
var baseline = func() size {
	c := qwen2(64, 128, 1, 1)
	c.VocabSize = baseVocab
	return size{"fixed cost", c}
}()

// bf16Label names the rows whose checkpoint 0 (bf16Checkpoint) holds
// bfloat16 values.
const (
	bf16Label      = "after, bfloat16 init"
	bf16Checkpoint = "checkpoint-0-bf16"
)

const (
	longTokens  = 2048
	shortTokens = 64
	promptLen   = 16
)

func main() {
	before := flag.String("before", "", "aipo binary of the tree before (empty: only the working tree is measured)")
	after := flag.String("after", "", "aipo binary of the working tree")
	work := flag.String("work", "build/memory", "scratch directory for the run directories")
	out := flag.String("out", "", "also write the report here (Markdown)")
	only := flag.String("sizes", "25M,100M,300M", "comma-separated sizes to measure")
	beforeLabel := flag.String("before-label", "before", "name of the before build in the report")
	flag.Parse()
	if *after == "" {
		fmt.Fprintln(os.Stderr, "memorybench: -after is required")
		os.Exit(2)
	}
	var picked []size
	for _, s := range sizes {
		if strings.Contains(","+*only+",", ","+s.name+",") {
			picked = append(picked, s)
		}
	}
	b := &bench{work: *work, before: *before, after: *after}
	if err := b.run(picked, *beforeLabel, *out); err != nil {
		fmt.Fprintln(os.Stderr, "memorybench:", err)
		os.Exit(1)
	}
}

type bench struct {
	work, before, after string
	report              strings.Builder
}

func (b *bench) printf(format string, args ...any) {
	fmt.Printf(format, args...)
	fmt.Fprintf(&b.report, format, args...)
}

// measurement is one `aipo learn`.
type measurement struct {
	peak    int64   // bytes
	seconds float64 // wall time of the child
	skipped string  // why it was not run
}

// build is one aipo binary measured, with the checkpoint it starts from.
type build struct {
	label, bin string
	after      bool
	bf16       bool // checkpoint 0 holds bfloat16 values, as a run seeded from a Hugging Face release
}

// point is a size's short-step peak against its parameter count.
type point struct {
	P     int64
	short int64
}

// result is the working tree's long step with activation checkpointing on,
// for the last table.
type result struct {
	size, init           string
	bpp, zero, act, time float64
	plan, measured       int64
}

// run measures the picked sizes with every build, prints the three tables
// as it goes and writes them to out when set.
func (b *bench) run(picked []size, beforeLabel, out string) error {
	ctx := context.Background()
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return err
	}
	builds := []build{{beforeLabel, b.before, false, false}, {"after", b.after, true, false}, {bf16Label, b.after, true, true}}
	if b.before == "" {
		builds = builds[1:]
	}
	fixed, err := b.fixedCosts(ctx, builds)
	if err != nil {
		return err
	}
	b.printIntro(beforeLabel, fixed)
	shorts := map[string][]point{}
	var after []result
	for _, s := range picked {
		P := model.ParamCount(s.cfg)
		dir, err := b.prepare(ctx, s)
		if err != nil {
			return err
		}
		for _, bd := range builds {
			short, r, err := b.measure(s, dir, bd, fixed[bd.label])
			if err != nil {
				return err
			}
			if short.skipped == "" {
				shorts[bd.label] = append(shorts[bd.label], point{P, short.peak})
			}
			if r.size != "" {
				after = append(after, r)
			}
		}
	}
	b.printSlopes(picked, builds, fixed, shorts)
	b.printCheckpointing(after)
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, []byte(b.report.String()), 0o644)
	}
	return nil
}

// fixedCosts is each build's fixed cost, keyed by its label: the peak of
// the short step of the baseline model.
func (b *bench) fixedCosts(ctx context.Context, builds []build) (map[string]int64, error) {
	fixed := map[string]int64{}
	base, err := b.prepare(ctx, baseline)
	if err != nil {
		return nil, err
	}
	for _, bd := range builds {
		m := b.learn(bd.bin, base, shortTokens, "", bd.after, bd.bf16)
		if m.skipped != "" {
			return nil, fmt.Errorf("%s: fixed-cost step: %s", bd.label, m.skipped)
		}
		fixed[bd.label] = m.peak
	}
	return fixed, nil
}

// printIntro prints the report's title, how it was measured and the head
// of the first table.
func (b *bench) printIntro(beforeLabel string, fixed map[string]int64) {
	b.printf("# Learner step memory on the CPU: %s and after, side by side\n\n", beforeLabel)
	b.printf("Produced by scripts/memory-bench.sh (learner/internal/memorybench) on %s; do not edit by hand.\n", time.Now().UTC().Format("2006-01-02"))
	b.printf("One `aipo learn` step per row (a child process, its peak RSS from getrusage), the loss with a KL term so the\n")
	b.printf("reference model is held, micro_batch_tokens 2048, one sequence of %d tokens (long) or %d (short).\n", longTokens, shortTokens)
	b.printf("Host B/param (net) = (short-step peak - fixed cost) / parameters, the fixed cost being the peak of the same step on a\n")
	b.printf("1-layer, 64-wide model of a 256-token vocabulary (%s: %s; after: %s); it still holds what a step needs\n",
		beforeLabel, mib(fixed[beforeLabel]), mib(fixed["after"]))
	b.printf("whatever the model's size (buffers of a 64-token pass, of the checkpoint writer), which the slope between sizes\n")
	b.printf("(second table) leaves out. Act B/token/layer = (long peak - short peak) / (%d tokens x layers). Host B/param at 0\n", longTokens-shortTokens)
	b.printf("tokens leaves out the short step's own per-token memory too (its activations and its rows of logits): the net peak\n")
	b.printf("extrapolated to a step of no tokens along the line through the short and the long step without checkpointing.\n")
	b.printf("Rows %q start from the same weights rounded to bfloat16 (torch_dtype bfloat16, as a run seeded from a\n", bf16Label)
	b.printf("Hugging Face release of Qwen2.5, Qwen3 or Llama 3 starts): the reference then holds its matrices in bfloat16.\n\n")
	b.printf("| size | params | layers | hidden | build | checkpointing | short peak | long peak | host B/param (net) | host B/param at 0 tokens | act B/token/layer | 4 x hidden x 4 | long step s |\n")
	b.printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
}

// measure runs the short step and the long step (the working tree's with
// activation checkpointing off, then on) of size s, prepared in dir, with
// one build whose fixed cost is fixed, printing a row of the first table
// per long step. It returns the short step and, for the working tree, the
// checkpointing-on result (size "" when there is none).
func (b *bench) measure(s size, dir string, bd build, fixed int64) (measurement, result, error) {
	P := model.ParamCount(s.cfg)
	modes := []string{""}
	if bd.after {
		modes = []string{"off", "on"}
	}
	short := b.learn(bd.bin, dir, shortTokens, modes[0], bd.after, bd.bf16)
	var r result
	var seconds [2]float64
	zero := math.NaN() // host B/param at 0 tokens, from the first mode's long step
	for k, mode := range modes {
		long := b.learn(bd.bin, dir, longTokens, mode, bd.after, bd.bf16)
		label := mode
		if mode == "" {
			label = "(none)"
		}
		if short.skipped != "" || long.skipped != "" {
			b.printf("| %s | %.1fM | %d | %d | %s | %s | %s | %s | | | | | |\n", s.name, float64(P)/1e6, s.cfg.NumHiddenLayers,
				s.cfg.HiddenSize, bd.label, label, short.show(), long.show())
			continue
		}
		bpp := float64(short.peak-fixed) / float64(P)
		act := float64(long.peak-short.peak) / float64((longTokens-shortTokens)*s.cfg.NumHiddenLayers)
		if k == 0 {
			perToken := float64(long.peak-short.peak) / float64(longTokens-shortTokens)
			zero = (float64(short.peak-fixed) - perToken*shortTokens) / float64(P)
		}
		b.printf("| %s | %.1fM | %d | %d | %s | %s | %s | %s | %.1f | %.1f | %.0f | %d | %.1f |\n", s.name, float64(P)/1e6, s.cfg.NumHiddenLayers,
			s.cfg.HiddenSize, bd.label, label, mib(short.peak), mib(long.peak), bpp, zero, act, 16*s.cfg.HiddenSize, long.seconds)
		seconds[k] = long.seconds
		if mode == "on" {
			st, err := trainer.PlanStep(trainer.MemoryConfig{Model: s.cfg, MicroBatchTokens: longTokens, Checkpointing: "on", Reference: true, ReferenceBF16: bd.bf16})
			if err != nil {
				return short, result{}, err
			}
			r = result{size: s.name, init: bd.label, bpp: bpp, zero: zero, act: act, plan: st.Host.Total(), measured: long.peak - fixed}
		}
	}
	if r.size != "" && seconds[0] > 0 {
		r.time = seconds[1] / seconds[0]
	}
	return short, r, nil
}

// printSlopes prints the second table: host bytes per parameter as the
// slope of the short step's peak from each size to the next, the baseline
// first.
func (b *bench) printSlopes(picked []size, builds []build, fixed map[string]int64, shorts map[string][]point) {
	b.printf("\nHost bytes per parameter as the slope of the short step's peak over the parameters, from each size to the next\n")
	b.printf("(the fixed-cost model first): what a step holds for each parameter, the costs that do not grow with the model cancelled.\n\n")
	b.printf("| from | to |")
	for _, bd := range builds {
		b.printf(" %s B/param |", bd.label)
	}
	b.printf("\n|---|---|")
	for range builds {
		b.printf("---|")
	}
	b.printf("\n")
	names := []string{baseline.name}
	for _, s := range picked {
		names = append(names, s.name)
	}
	for i := 1; i < len(names); i++ {
		b.printf("| %s | %s |", names[i-1], names[i])
		for _, bd := range builds {
			pts := append([]point{{model.ParamCount(baseline.cfg), fixed[bd.label]}}, shorts[bd.label]...)
			if i < len(pts) && len(pts) == len(names) {
				b.printf(" %.1f |", float64(pts[i].short-pts[i-1].short)/float64(pts[i].P-pts[i-1].P))
			} else {
				b.printf(" (not run) |")
			}
		}
		b.printf("\n")
	}
}

// printCheckpointing prints the third table: the working tree's step with
// activation checkpointing on, its time against the step without it and
// the planner's prediction against the measured peak.
func (b *bench) printCheckpointing(after []result) {
	b.printf("\nAfter, with activation checkpointing on: the whole step's time against the step without it (load, scoring,\n")
	b.printf("training pass, save; BenchmarkCheckpointing times the training pass alone), and the planner (trainer.PlanStep:\n")
	b.printf("weights, gradients, AdamW moments, reference, one micro-batch's activations) against the long step's measured peak\n")
	b.printf("above the fixed cost.\n\n")
	b.printf("| size | build | host B/param net (target <= 20) | at 0 tokens | act B/token/layer (target <= 4 x hidden x 4) | step time on/off (target <= 1.4) | planned | measured | planned/measured |\n")
	b.printf("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range after {
		b.printf("| %s | %s | %.1f | %.1f | %.0f | %.2f | %s | %s | %.2f |\n", r.size, r.init, r.bpp, r.zero, r.act, r.time, mib(r.plan), mib(r.measured), float64(r.plan)/float64(r.measured))
	}
}

func (m measurement) show() string {
	if m.skipped != "" {
		return "not run: " + m.skipped
	}
	return mib(m.peak)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// prepare writes the size's checkpoint 0 and the step-0 trajectories of
// both lengths into work/<size>/{short,long} (one checkpoint, linked).
//
// A size goes to the first of -work and /dev/shm (memory: its files then
// count against what the runs may use, see projected) whose free space
// holds its two checkpoints 0 (float32, and bfloat16 with its float32
// masters) and one checkpoint a run writes (4 + 6 + 12 bytes a parameter,
// and a tenth more); the others are cleared first.
func (b *bench) prepare(ctx context.Context, s size) (string, error) {
	name := strings.ReplaceAll(s.name, " ", "-")
	need := 22 * model.ParamCount(s.cfg) * 11 / 10
	var dir string
	for _, root := range []string{b.work, "/dev/shm/memorybench"} {
		if d := filepath.Join(root, name); dirBytes(d) > 0 {
			dir = d // prepared already
			break
		}
	}
	if dir == "" {
		for _, root := range []string{b.work, "/dev/shm/memorybench"} {
			for _, other := range sizes {
				if other.name != s.name {
					os.RemoveAll(filepath.Join(root, other.name))
				}
			}
			if err := os.MkdirAll(root, 0o755); err != nil {
				continue
			}
			if free(root) >= need {
				dir = filepath.Join(root, name)
				break
			}
		}
	}
	if dir == "" {
		return "", fmt.Errorf("%s: no room for %s of checkpoints in %s or /dev/shm", s.name, mib(need), b.work)
	}
	ck, ck16 := filepath.Join(dir, "checkpoint-0"), filepath.Join(dir, bf16Checkpoint)
	ok, _ := checkpoint.Committed(ctx, ck)
	ok16, _ := checkpoint.Committed(ctx, ck16)
	if !ok || !ok16 {
		os.RemoveAll(dir)
		m, err := model.New(s.cfg, 1)
		if err != nil {
			return "", err
		}
		if err := trainer.SaveCheckpoint(ctx, ck, m, nil, nil, checkpoint.TrainerState{RunID: "memorybench"}); err != nil {
			return "", err
		}
		// The same weights rounded to bfloat16 (to nearest even), saved as
		// a bfloat16 model is.
		c := s.cfg
		c.TorchDtype = "bfloat16"
		m16, err := model.New(c, 1)
		if err != nil {
			return "", err
		}
		for i, v := range m16.ParamData() {
			m16.ParamData()[i] = checkpoint.BF16ToFloat32(checkpoint.Float32ToBF16(v))
		}
		if err := trainer.SaveCheckpoint(ctx, ck16, m16, nil, nil, checkpoint.TrainerState{RunID: "memorybench"}); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// learn runs one `aipo learn` of bin on a fresh run directory of tokens
// tokens (checkpoint 0 linked from the prepared one), with activation
// checkpointing mode (empty: the field is left out, for builds without
// it), and returns its peak RSS and wall time; after says the build is the
// working tree (for the projection of what it needs).
func (b *bench) learn(bin, dir string, tokens int, mode string, after, bf16 bool) measurement {
	if need, avail := projected(dir, tokens, mode, after), memAvailable(); avail > 0 && need > avail {
		return measurement{skipped: fmt.Sprintf("%s projected, %s available", mib(need), mib(avail))}
	}
	run := filepath.Join(dir, fmt.Sprintf("run-%d-%s-%d", tokens, mode, time.Now().UnixNano()))
	defer os.RemoveAll(run)
	from := filepath.Join(dir, "checkpoint-0")
	if bf16 {
		from = filepath.Join(dir, bf16Checkpoint)
	}
	if err := linkTree(from, rundir.Checkpoint(run, 0)); err != nil {
		return measurement{skipped: err.Error()}
	}
	ctx := context.Background()
	cfg, err := model.LoadConfig(filepath.Join(dir, "checkpoint-0", checkpoint.ConfigName))
	if err != nil {
		return measurement{skipped: err.Error()}
	}
	traj := trajectory(tokens, cfg.VocabSize)
	if _, err := schemas.WriteStep(ctx, rundir.Step(run, 0), [][]schemas.Trajectory{{traj}}, schemas.Manifest{Run: "memorybench"}); err != nil {
		return measurement{skipped: err.Error()}
	}
	yaml := fmt.Sprintf("run: {name: memorybench, dir: %s, steps: 1}\ndata: {demo: true}\nlearner:\n  loss: {kl_coef: 0.001}\n  micro_batch_tokens: %d\n", run, longTokens)
	if mode != "" {
		yaml += "  activation_checkpointing: " + mode + "\n"
	}
	cfgPath := rundir.RunYAML(run)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		return measurement{skipped: err.Error()}
	}
	cmd := exec.Command(bin, "learn", "--run", run, "--config", cfgPath, "--step", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if e := os.Getenv("MEMORYBENCH_CHILD_ENV"); e != "" {
		cmd.Env = append(os.Environ(), strings.Fields(e)...)
	}
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return measurement{skipped: fmt.Sprintf("aipo learn failed: %v: %s", err, strings.TrimSpace(stderr.String()))}
	}
	return measurement{peak: meminfo.Peak(cmd.ProcessState), seconds: time.Since(t0).Seconds()}
}

// trajectory is one correct policy trajectory of tokens tokens of a
// vocabulary of v.
func trajectory(tokens, v int) schemas.Trajectory {
	resp := tokens - promptLen
	t := schemas.Trajectory{SchemaVersion: schemas.SchemaVersion, Run: "memorybench", PromptID: "p0", DataSource: "demo",
		PromptIDs: make([]int32, promptLen), ResponseIDs: make([]int32, resp), TokenSource: make([]int8, resp),
		BehaviorLogProbs: make([]float32, resp), ResponseText: "x", Reward: 1, Correct: true, Advantage: 1, FinishReason: sampling.FinishStop}
	for i := range t.PromptIDs {
		t.PromptIDs[i] = int32(1 + i)
	}
	for i := range t.ResponseIDs {
		t.ResponseIDs[i] = int32((i*7919 + 13) % v)
		t.TokenSource[i] = schemas.SourcePolicy
		t.BehaviorLogProbs[i] = -10
	}
	return t
}

// linkTree hard-links the files of src into dst (the runs read checkpoint
// 0 and never change it).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return os.Link(p, target)
	})
}

// projected is a generous bound of what a step of the prepared model
// needs, so that a run that could not fit the machine is skipped rather
// than pushing the machine's other work out of memory: for the working
// tree its planner's figure and a quarter more, for the tree before 52
// bytes a parameter and the activations without checkpointing; with the
// run directory in memory, the checkpoint it writes.
func projected(dir string, tokens int, mode string, after bool) int64 {
	cfg, err := model.LoadConfig(filepath.Join(dir, "checkpoint-0", checkpoint.ConfigName))
	if err != nil {
		return 0
	}
	var files int64
	if strings.HasPrefix(dir, "/dev/shm/") {
		files = 12 * model.ParamCount(cfg) // the checkpoint the run writes, in memory
	}
	if after {
		st, err := trainer.PlanStep(trainer.MemoryConfig{Model: cfg, MicroBatchTokens: tokens, Checkpointing: mode, Reference: true})
		if err != nil {
			return 0
		}
		return st.Host.Total()*5/4 + files
	}
	return 52*model.ParamCount(cfg) + model.PassBytes(cfg, model.Packed(tokens, tokens, false)) + files
}

// free is the space left on the file system of dir.
func free(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * st.Bsize
}

// dirBytes is the size of the files under dir (0 when it does not exist).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// memAvailable is /proc/meminfo's MemAvailable less 2 GiB of margin (0
// when unknown).
func memAvailable() int64 {
	_, avail, err := meminfo.Read()
	if err != nil {
		return 0
	}
	return avail - 2<<30
}
