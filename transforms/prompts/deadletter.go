package prompts

import (
	"context"
	"fmt"
	"sort"

	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
)

func init() {
	register.DoFn4x1[context.Context, []byte, func(*DeadLetter) bool, func(int), error](&writeDeadFn{})
	register.Iter1[DeadLetter]()
	register.Emitter1[int]()
}

// WriteDeadLetters writes every dead letter to one JSONL file at path (local
// or gs://), sorted by file and record index so that reruns give the same
// bytes. The file is written even when there are no dead letters, so that
// its presence says the read finished.
//
// Input: dead is PCollection<DeadLetter>. Output: PCollection<int> holding
// one element, the number of letters written.
func WriteDeadLetters(s beam.Scope, path string, dead beam.PCollection) beam.PCollection {
	s = s.Scope("prompts.WriteDeadLetters")
	return beam.ParDo(s, &writeDeadFn{Path: path}, beam.Impulse(s), beam.SideInput{Input: dead})
}

// writeDeadFn gathers the dead letters from a side input and writes them.
// Dead letters are few (bad rows of prompt files), so one worker holds them.
type writeDeadFn struct {
	Path string `json:"path"`
}

func (f *writeDeadFn) ProcessElement(ctx context.Context, _ []byte, iter func(*DeadLetter) bool, emit func(int)) error {
	var all []DeadLetter
	var d DeadLetter
	for iter(&d) {
		all = append(all, d)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].File != all[j].File {
			return all[i].File < all[j].File
		}
		return all[i].Index < all[j].Index
	})
	if err := promptfile.WriteDeadLetters(ctx, f.Path, all); err != nil {
		return fmt.Errorf("prompts.WriteDeadLetters: %w", err)
	}
	emit(len(all))
	return nil
}
