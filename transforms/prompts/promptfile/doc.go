// Package promptfile reads prompt datasets (JSONL, gzipped JSONL, JSON
// arrays and Parquet) into schemas.Prompt rows through a field mapping, with
// no dependency on Beam, so that any part of aipo can load a benchmark or a
// training set the same way.
//
// A Source names one file (local or gs://), its format (detected from the
// file when empty), a FieldMap saying which source fields hold the problem,
// the answer, the solution and the id, and the data_source written into
// every row (the rollout and eval pipelines choose the verifier by it).
// Presets ("aime24", "gsm8k", ...) fill the mapping for the known datasets:
// the benchmark files bundled in data/benchmarks and the usual layout of
// the training sets (gsm8k_train, deepscaler_math) where you keep them.
//
// Read streams good rows to one callback and bad rows to another: a row
// that is not JSON, not an object, has invalid UTF-8, lacks a problem or an
// answer, has a field of the wrong type or repeats an id becomes a
// DeadLetter naming the file, the line (for text formats) or the record
// index, and a reason code; reading goes on with the next row. Only
// file-level failures (missing file, unreadable Parquet footer, a JSON array
// whose structure breaks) end a file, the last of these after dead-lettering
// the element where the structure broke.
//
// Mapping rules:
//   - Each mapped field is a list of candidate names; the first one present
//     with a non-null value wins. A name may be a dotted path into nested
//     objects and arrays ("reward_model.ground_truth", "prompt.0.content").
//   - Numbers become text without a spurious fraction: 27.0 becomes "27",
//     2.5 stays "2.5".
//   - With AnswerMarker set (GSM8K's "#### "), the answer is the text after
//     the last marker and the text before it becomes the solution when no
//     solution field is mapped.
//   - The row id is "<data_source>/<source id>", or "<data_source>/<record
//     index>" when the file has no id field, so that ids from different
//     datasets never collide when they are mixed.
//   - Every source field that the mapping does not consume (and that Drop
//     does not name) is kept in Prompt.Extra as a JSON object.
package promptfile
