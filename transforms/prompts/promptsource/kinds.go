package promptsource

import (
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
)

// The kind of prompt source every program has: files. A task registers
// its own kind (the demo task's demo, tasks/demo). transforms/trajectories
// registers how a step draws from files (Select and Refill).
func init() {
	RegisterKind(KindFile, fileKind{})
}

// Defaults of the file kind.
const (
	// FileBatchSize is the prompts per step of a run on prompt files (the
	// paper's 256).
	FileBatchSize = 256
	// FilePromptTokens is the prompt length the memory plan assumes for
	// prompt files.
	FilePromptTokens = 1024
)

// fileKind reads prompt files: every entry's rows make one dataset, from
// which a step takes its batch and the further draws of dynamic sampling.
type fileKind struct{}

func (fileKind) Fill(List) {}

func (fileKind) Check(ss List) error {
	for i, s := range ss {
		field := fmt.Sprintf("data.sources[%d]", i)
		switch {
		case s.Task != "":
			return fmt.Errorf("%s.task: is a setting of a task's source; a file source has path, format, preset, fields and data_source (write the task's kind, as kind: demo, for a task; known kinds: %s)", field, strings.Join(KindNames(), ", "))
		case s.Split != "":
			return fmt.Errorf("%s.split: is a setting of a task's source; a file source has path, format, preset, fields and data_source (write the task's kind, as kind: demo, for a task; known kinds: %s)", field, strings.Join(KindNames(), ", "))
		}
		r, err := s.Resolve()
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if storage.MissingLocal(r.Path) {
			return fmt.Errorf("%s.path: %s does not exist (relative paths are relative to the config file)", field, r.Path)
		}
	}
	return nil
}

func (fileKind) Defaults(List) Defaults {
	return Defaults{BatchSize: FileBatchSize, PromptTokens: FilePromptTokens}
}

func (fileKind) Label(ss List) string {
	paths := make([]string, len(ss))
	for i, s := range ss {
		paths[i] = s.Path
	}
	return strings.Join(paths, ",")
}
