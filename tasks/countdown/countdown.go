// Package countdown is the Countdown task, as the TinyZero and veRL
// examples train it: given three or four numbers, write an arithmetic
// expression with + - * / and parentheses that uses each number at most
// once and equals a target. Its puzzles are generated offline from a seed
// (every target is reachable: it is the value of an expression over the
// numbers), split into a training pool and a held-out test set that share
// no puzzle.
//
// Text forms:
//
//	prompt:    3,5,7=22?          the numbers, then the target
//	response:  3*5+7;             an expression, ended by ';'
//	answer:    3,5,7=22           the ground truth the verifier reads
//
// It is a task package (package tasks): its init registers the kind of
// prompt source countdown, the draw of its puzzles, the verifier of
// data_source countdown and the benchmark preset countdown (the held-out
// test set, scored by the eval pipeline). configs/countdown.yaml is a run
// configuration.
package countdown

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Config sizes the task. The zero value is not valid; use DefaultConfig.
type Config struct {
	Seed      uint64 `yaml:"seed" json:"seed"`             // generates every puzzle
	MinCount  int    `yaml:"min_count" json:"min_count"`   // fewest numbers in a puzzle
	MaxCount  int    `yaml:"max_count" json:"max_count"`   // most numbers in a puzzle
	MaxNumber int    `yaml:"max_number" json:"max_number"` // numbers are drawn from 1..max_number
	MaxTarget int    `yaml:"max_target" json:"max_target"` // targets are in 1..max_target
	Train     int    `yaml:"train" json:"train"`           // puzzles of the training pool
	Test      int    `yaml:"test" json:"test"`             // held-out puzzles, none of them in the pool
}

// DefaultConfig is TinyZero's shape at a size a small model learns on a
// CPU: three or four numbers from 1..12 (TinyZero's go to 99: max_number
// 99, max_target 99), targets 1..36, a pool of 10,000 training puzzles and
// 200 held out.
func DefaultConfig() Config {
	return Config{Seed: 1, MinCount: 3, MaxCount: 4, MaxNumber: 12, MaxTarget: 36, Train: 10000, Test: 200}
}

// Validate reports the first invalid field, saying what to write instead.
func (c Config) Validate() error {
	switch {
	case c.MinCount < 2 || c.MaxCount < c.MinCount || c.MaxCount > 6:
		return fmt.Errorf("countdown task: min_count %d and max_count %d must satisfy 2 <= min_count <= max_count <= 6", c.MinCount, c.MaxCount)
	case c.MaxNumber < 1 || c.MaxNumber > 10000:
		return fmt.Errorf("countdown task: max_number %d must be in 1..10000", c.MaxNumber)
	case c.MaxTarget < 1 || c.MaxTarget > 1000000:
		return fmt.Errorf("countdown task: max_target %d must be in 1..1000000", c.MaxTarget)
	case c.Train < 1 || c.Train > 1000000:
		return fmt.Errorf("countdown task: train %d must be in 1..1000000", c.Train)
	case c.Test < 1 || c.Test > 100000:
		return fmt.Errorf("countdown task: test %d must be in 1..100000", c.Test)
	}
	return nil
}

// Puzzle is one Countdown problem with one of its solutions.
type Puzzle struct {
	Numbers  []int
	Target   int
	Solution string // an expression over Numbers equal to Target
}

// Key names the puzzle by its numbers (sorted) and target, so that two
// puzzles that differ only in the order of their numbers are one.
func (p Puzzle) Key() string {
	ns := slices.Clone(p.Numbers)
	slices.Sort(ns)
	return joinInts(ns) + "=" + strconv.Itoa(p.Target)
}

// Prompt is the puzzle's prompt text: "3,5,7=22?".
func (p Puzzle) Prompt() string { return joinInts(p.Numbers) + "=" + strconv.Itoa(p.Target) + "?" }

// Answer is the ground truth the verifier reads: "3,5,7=22".
func (p Puzzle) Answer() string { return joinInts(p.Numbers) + "=" + strconv.Itoa(p.Target) }

// Response is the solution as the policy writes it: "3*5+7;".
func (p Puzzle) Response() string { return p.Solution + Terminator }

// Terminator ends a response.
const Terminator = ";"

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Split selects the puzzles questions are drawn from.
type Split string

// The splits: the training pool and the held-out test set.
const (
	SplitTrain Split = "train"
	SplitTest  Split = "test"
)

// Task is a generated instance of the task.
type Task struct {
	cfg         Config
	train, test []Puzzle
}

// New generates the task for cfg: the test set first, then the training
// pool from another stream, skipping any puzzle of the test set.
func New(cfg Config) (*Task, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Task{cfg: cfg}
	held := map[string]bool{}
	var err error
	if t.test, err = generate(cfg, rand.New(rand.NewPCG(cfg.Seed, 0x7e57)), cfg.Test, held); err != nil {
		return nil, err
	}
	if t.train, err = generate(cfg, rand.New(rand.NewPCG(cfg.Seed, 0x7a1e)), cfg.Train, held); err != nil {
		return nil, err
	}
	return t, nil
}

// generate draws n distinct puzzles not in taken (and adds their keys to
// it). A setting with too few distinct puzzles is an error naming it.
func generate(cfg Config, rng *rand.Rand, n int, taken map[string]bool) ([]Puzzle, error) {
	out := make([]Puzzle, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n+10000 {
			return nil, fmt.Errorf("countdown task: found %d distinct puzzles of %d after %d tries: raise max_number or max_target, or ask for fewer puzzles (train, test)", len(out), n, tries)
		}
		p, ok := draw(cfg, rng)
		if !ok || taken[p.Key()] {
			continue
		}
		taken[p.Key()] = true
		out = append(out, p)
	}
	return out, nil
}

// draw builds one puzzle: numbers, then a random expression over all of
// them whose value, when a whole number in 1..MaxTarget, is the target.
// Intermediate values may be fractions; they are exact.
func draw(cfg Config, rng *rand.Rand) (Puzzle, bool) {
	k := cfg.MinCount + rng.IntN(cfg.MaxCount-cfg.MinCount+1)
	nums := make([]int, k)
	type term struct {
		v    *big.Rat
		text string
		op   byte // the operator at the top of text, 0 for a number
	}
	terms := make([]term, k)
	for i := range nums {
		nums[i] = 1 + rng.IntN(cfg.MaxNumber)
		terms[i] = term{v: new(big.Rat).SetInt64(int64(nums[i])), text: strconv.Itoa(nums[i])}
	}
	for len(terms) > 1 {
		i := rng.IntN(len(terms))
		a := terms[i]
		terms = slices.Delete(terms, i, i+1)
		j := rng.IntN(len(terms))
		b := terms[j]
		terms = slices.Delete(terms, j, j+1)
		op := "+-*/"[rng.IntN(4)]
		v := new(big.Rat)
		switch op {
		case '+':
			v.Add(a.v, b.v)
		case '-':
			v.Sub(a.v, b.v)
		case '*':
			v.Mul(a.v, b.v)
		case '/':
			if b.v.Sign() == 0 {
				return Puzzle{}, false
			}
			v.Quo(a.v, b.v)
		}
		terms = append(terms, term{v: v, text: paren(a.text, a.op, op, false) + string(op) + paren(b.text, b.op, op, true), op: op})
	}
	v := terms[0].v
	if !v.IsInt() || !v.Num().IsInt64() || v.Num().Int64() < 1 || v.Num().Int64() > int64(cfg.MaxTarget) {
		return Puzzle{}, false
	}
	return Puzzle{Numbers: nums, Target: int(v.Num().Int64()), Solution: terms[0].text}, true
}

// paren wraps text (whose top operator is inner) in parentheses when it is
// an operand of outer that needs them: a sum under * or /, or anything but
// a number or product on the right of - or /.
func paren(text string, inner, outer byte, right bool) string {
	low := func(op byte) bool { return op == '+' || op == '-' }
	need := false
	switch {
	case inner == 0:
	case (outer == '*' || outer == '/') && low(inner):
		need = true
	case right && outer == '-' && low(inner):
		need = true
	case right && outer == '/' && !low(inner):
		need = true
	}
	if need {
		return "(" + text + ")"
	}
	return text
}

// Config returns the task's configuration.
func (t *Task) Config() Config { return t.cfg }

// Puzzles returns the puzzles of a split, in generation order.
func (t *Task) Puzzles(split Split) []Puzzle {
	if split == SplitTest {
		return slices.Clone(t.test)
	}
	return slices.Clone(t.train)
}

// Sample draws n puzzles of a split with replacement from rng.
func (t *Task) Sample(split Split, n int, rng *rand.Rand) []Puzzle {
	all := t.train
	if split == SplitTest {
		all = t.test
	}
	out := make([]Puzzle, n)
	for i := range out {
		out[i] = all[rng.IntN(len(all))]
	}
	return out
}
