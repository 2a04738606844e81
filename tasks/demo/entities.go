package demo

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Tags of the interaction protocol as they appear in demo text.
const (
	TagRetrieval    = "<retrieval>"
	TagRetrievalEnd = "</retrieval>"
	TagReason       = "<reason>"
	TagReasonEnd    = "</reason>"
	TagVerify       = "<verify>"
	TagVerifyEnd    = "</verify>"
	TagResult       = "<result>"
	TagResultEnd    = "</result>"
	Terminator      = ";"
)

// Config sizes the task. The zero value is not valid; use DefaultConfig.
type Config struct {
	Seed        uint64  `yaml:"seed" json:"seed"`                 // generates names, values and the split
	NumEntities int     `yaml:"num_entities" json:"num_entities"` // total invented entities
	SeenFrac    float64 `yaml:"seen_frac" json:"seen_frac"`       // fraction whose facts the warm start learns
	MinValue    int     `yaml:"min_value" json:"min_value"`       // smallest entity value
	MaxValue    int     `yaml:"max_value" json:"max_value"`       // largest entity value
	MaxN        int     `yaml:"max_n" json:"max_n"`               // questions add 1..MaxN
}

// DefaultConfig is the demo's setting: 40 entities, half seen, values
// 100..999, N in 1..9.
func DefaultConfig() Config {
	return Config{Seed: 7, NumEntities: 40, SeenFrac: 0.5, MinValue: 100, MaxValue: 999, MaxN: 9}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.NumEntities < 2 || c.NumEntities > 2000:
		return fmt.Errorf("demo task: num_entities %d must be in 2..2000", c.NumEntities)
	case c.SeenFrac <= 0 || c.SeenFrac >= 1:
		return fmt.Errorf("demo task: seen_frac %g must be in (0,1)", c.SeenFrac)
	case c.MinValue < 0 || c.MaxValue-c.MinValue+1 < c.NumEntities:
		return fmt.Errorf("demo task: values %d..%d cannot give %d distinct entities", c.MinValue, c.MaxValue, c.NumEntities)
	case c.MaxN < 1:
		return fmt.Errorf("demo task: max_n %d must be at least 1", c.MaxN)
	}
	return nil
}

// Entity is one invented fact.
type Entity struct {
	Name  string
	Value int
	Seen  bool
}

// Task is a generated instance of the demo task.
type Task struct {
	cfg      Config
	entities []Entity
	byName   map[string]int
}

const (
	consonants = "bcdfghjklmnprstvwz"
	vowels     = "aeiou"
)

// New generates the task for cfg.
func New(cfg Config) (*Task, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	t := &Task{cfg: cfg, byName: map[string]int{}}
	values := rng.Perm(cfg.MaxValue - cfg.MinValue + 1)
	for len(t.entities) < cfg.NumEntities {
		name := RandomName(rng)
		if _, dup := t.byName[name]; dup {
			continue
		}
		t.byName[name] = len(t.entities)
		t.entities = append(t.entities, Entity{Name: name, Value: cfg.MinValue + values[len(t.entities)]})
	}
	seen := int(float64(cfg.NumEntities)*cfg.SeenFrac + 0.5)
	for i, j := range rng.Perm(cfg.NumEntities) {
		t.entities[j].Seen = i < seen
	}
	return t, nil
}

// RandomName draws a pronounceable four-letter name (consonant, vowel,
// consonant, consonant-or-vowel).
func RandomName(rng *rand.Rand) string {
	b := []byte{
		consonants[rng.IntN(len(consonants))],
		vowels[rng.IntN(len(vowels))],
		consonants[rng.IntN(len(consonants))],
		(consonants + vowels)[rng.IntN(len(consonants)+len(vowels))],
	}
	return string(b)
}

// Config returns the task's configuration.
func (t *Task) Config() Config { return t.cfg }

// Entities returns all entities in generation order.
func (t *Task) Entities() []Entity { return append([]Entity(nil), t.entities...) }

// Lookup returns an entity's value.
func (t *Task) Lookup(name string) (int, bool) {
	i, ok := t.byName[strings.TrimSpace(name)]
	if !ok {
		return 0, false
	}
	return t.entities[i].Value, true
}

// IsEntity reports whether name is one of the task's entities.
func (t *Task) IsEntity(name string) bool { _, ok := t.byName[name]; return ok }

// Question is one demo problem.
type Question struct {
	ID     string // "<name>+<n>"
	Entity string
	N      int
	Answer int
	Seen   bool
	Prompt string // "lugr+3?"
}

// Split selects entities for questions.
type Split string

// Splits of the entities.
const (
	SplitSeen   Split = "seen"
	SplitUnseen Split = "unseen"
	SplitAll    Split = "all"
)

// AllQuestions returns every question of a split (entities x 1..MaxN),
// sorted by ID.
func (t *Task) AllQuestions(split Split) []Question {
	var out []Question
	for _, e := range t.entities {
		if (split == SplitSeen && !e.Seen) || (split == SplitUnseen && e.Seen) {
			continue
		}
		for n := 1; n <= t.cfg.MaxN; n++ {
			out = append(out, t.question(e, n))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (t *Task) question(e Entity, n int) Question {
	id := e.Name + "+" + strconv.Itoa(n)
	return Question{ID: id, Entity: e.Name, N: n, Answer: e.Value + n, Seen: e.Seen, Prompt: id + "?"}
}

// Sample draws n questions of a split with replacement from rng.
func (t *Task) Sample(split Split, n int, rng *rand.Rand) []Question {
	all := t.AllQuestions(split)
	out := make([]Question, n)
	for i := range out {
		out[i] = all[rng.IntN(len(all))]
	}
	return out
}

// Direct is the direct answer text for a value and n.
func Direct(value, n int) string {
	return TagResult + strconv.Itoa(value) + TagResultEnd + Arith(value, n)
}

// Calling is the calling answer text: the query, then the result.
func Calling(name string, value, n int) string {
	return TagRetrieval + name + TagRetrievalEnd + Direct(value, n)
}

// Arith is the arithmetic line "v+n=s;".
func Arith(value, n int) string {
	return fmt.Sprintf("%d+%d=%d%s", value, n, value+n, Terminator)
}

// Score extracts the number after the last '=' of a response and reports
// whether it equals answer and is followed by the terminator.
func Score(response string, answer int) (correct bool, extracted string) {
	i := strings.LastIndexByte(response, '=')
	if i < 0 {
		return false, ""
	}
	rest := response[i+1:]
	j := 0
	for j < len(rest) && (rest[j] >= '0' && rest[j] <= '9' || (j == 0 && rest[j] == '-')) {
		j++
	}
	extracted = rest[:j]
	if j == 0 || !strings.HasPrefix(rest[j:], Terminator) {
		return false, extracted
	}
	v, err := strconv.Atoi(extracted)
	return err == nil && v == answer, extracted
}
