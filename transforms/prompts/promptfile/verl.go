package promptfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/parquet-go/parquet-go"
)

// VERLRow is one row in the layout of veRL's preprocessed datasets (the
// data_preprocess scripts of volcengine/verl, and DAPO-Math-17k): what the
// verl preset reads and WriteVERL writes.
type VERLRow struct {
	// DataSource picks the row's verifier.
	DataSource string `parquet:"data_source" json:"data_source"`
	// Prompt is the chat: here one user message holding the problem.
	Prompt  []VERLMessage `parquet:"prompt,list" json:"prompt"`
	Ability string        `parquet:"ability" json:"ability"`
	// RewardModel holds the reference answer (style "rule": a verifier
	// checks it).
	RewardModel VERLReward `parquet:"reward_model" json:"reward_model"`
	ExtraInfo   VERLExtra  `parquet:"extra_info" json:"extra_info"`
}

// VERLMessage is one chat message.
type VERLMessage struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
}

// VERLReward is veRL's reward_model column.
type VERLReward struct {
	Style       string `parquet:"style" json:"style"`
	GroundTruth string `parquet:"ground_truth" json:"ground_truth"`
}

// VERLExtra is the extra_info column as WriteVERL fills it.
type VERLExtra struct {
	Split string `parquet:"split" json:"split"`
	// Index is the row's position in the source file.
	Index int64 `parquet:"index" json:"index"`
	// ID is the source's own id of the row (the verl preset reads it back
	// as the row id).
	ID string `parquet:"id" json:"id"`
	// Solution is the source's worked solution, if any (the verl preset
	// reads it back as the solution: LUFFY's guidance traces).
	Solution string `parquet:"solution,optional" json:"solution,omitempty"`
	// Fields holds the source row's other fields as a JSON object (subject,
	// level, ...), so that nothing is lost.
	Fields string `parquet:"fields,optional" json:"fields,omitempty"`
}

// ToVERL writes prompt p, the index-th row of its file, as a veRL row of
// the given split and ability.
func ToVERL(p schemas.Prompt, index int64, split, ability string) VERLRow {
	id := strings.TrimPrefix(p.ID, p.DataSource+"/")
	return VERLRow{
		DataSource:  p.DataSource,
		Prompt:      []VERLMessage{{Role: "user", Content: p.Problem}},
		Ability:     ability,
		RewardModel: VERLReward{Style: "rule", GroundTruth: p.Answer},
		ExtraInfo:   VERLExtra{Split: split, Index: index, ID: id, Solution: p.Solution, Fields: p.Extra},
	}
}

// WriteVERL writes rows to path (local or gs://): Parquet when the name
// ends in .parquet, JSONL when it ends in .jsonl.
func WriteVERL(ctx context.Context, path string, rows []VERLRow) error {
	var b bytes.Buffer
	switch {
	case strings.HasSuffix(path, ".parquet"):
		w := parquet.NewGenericWriter[VERLRow](&b, parquet.Compression(&parquet.Zstd))
		if _, err := w.Write(rows); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	case strings.HasSuffix(path, ".jsonl"):
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
		}
	default:
		return fmt.Errorf("write %s: name the output .parquet or .jsonl (the two layouts veRL reads)", path)
	}
	return storage.WriteAtomic(ctx, path, b.Bytes())
}
