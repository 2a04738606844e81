// Package schemas defines the rows that aipo stores in Parquet (trajectories,
// prompts, eval records), the step manifest that commits a set of shards,
// and the plain Go writer and readers of those shards. It runs no Beam
// pipeline: the learner reads steps through this package alone, and the Beam
// sink and source build on it.
//
// # Columns
//
// Every column of the three row types. Per-token lists are flat lists per
// row (not nested structs), so DuckDB, Arrow and pandas read them as plain
// list columns. Trajectory and EvalRecord columns are never null; Prompt's
// optional columns are null when empty. "dict" marks dictionary-encoded
// columns.
//
//	| row        | column                 | Parquet type         | meaning and invariants                                                                                          |
//	|------------|------------------------|----------------------|-----------------------------------------------------------------------------------------------------------------|
//	| all        | schema_version         | int32                | SchemaVersion of the writer; readers refuse versions they do not know                                           |
//	| Trajectory | run                    | string, dict         | run name (the run directory's base name)                                                                        |
//	| Trajectory | step                   | int64                | training step whose rollout produced the row (the step directory's number)                                      |
//	| Trajectory | policy_version         | int64                | policy version of the weights that sampled the policy tokens, as the server named it (the oldest, if several: the minimum of token_policy_version over policy tokens) |
//	| Trajectory | prompt_id              | string               | Prompt.id of the problem                                                                                        |
//	| Trajectory | sample_index           | int32                | index of this sample in its prompt's group, 0..group-1                                                          |
//	| Trajectory | data_source            | string, dict         | Prompt.data_source; picks the verifier                                                                          |
//	| Trajectory | prompt_ids             | list<int32>          | token ids of the rendered prompt (system prompt and problem), policy tokenizer                                  |
//	| Trajectory | response_ids           | list<int32>          | token ids of the response, policy and external tokens in order, policy tokenizer                                |
//	| Trajectory | token_source           | list<int8>           | per response token: 0 policy, 1 verify, 2 knowledge, 3 reason, 4 template, 5 guide; len(response_ids)           |
//	| Trajectory | behavior_logprobs      | list<float32>        | per response token: log-prob under the sampling policy for policy tokens, exactly 0 for all others; len = len(response_ids) |
//	| Trajectory | token_policy_version   | list<int64>          | per response token: policy version of the weights that sampled it (policy tokens), or that the sample was on when the token was appended (others); empty: every token at policy_version (schema version 1 shards, which lack the column, read this way) |
//	| Trajectory | response_text          | string               | detokenised response, for reading and verifiers                                                                 |
//	| Trajectory | interaction_agent      | list<string>         | per collaborator call, in call order: verify, knowledge or reason                                               |
//	| Trajectory | interaction_query      | list<string>         | the text the policy wrote between the agent's tags                                                              |
//	| Trajectory | interaction_result     | list<string>         | the text appended inside <result>...</result> (answer or notice)                                                |
//	| Trajectory | interaction_status     | list<string>         | ok, error, timeout or limit (max interactions reached)                                                          |
//	| Trajectory | interaction_latency_ms | list<float32>        | wall time of the call in milliseconds                                                                           |
//	| Trajectory | interaction_span_start | list<int32>          | [start, end) offsets into response_ids of the tokens appended for the call (wrapper and result);                |
//	| Trajectory | interaction_span_end   | list<int32>          | 0 <= start <= end <= len(response_ids), spans in call order without overlap, every token inside is external    |
//	| Trajectory | interaction_noisy      | list<bool>           | the Knowledge Agent deliberately returned noisy documents; false for other agents                               |
//	|            |                        |                      | all interaction_* lists have the same length, one entry per call                                                |
//	| Trajectory | reward                 | float32              | verifier reward of the whole response                                                                           |
//	| Trajectory | correct                | bool                 | the verifier judged the final answer correct                                                                    |
//	| Trajectory | advantage              | float32              | group-normalised advantage, the same for every token of the row                                                 |
//	| Trajectory | finish_reason          | string, dict         | eos, stop, length or error (error: the rollout failed; reward 0)                                                |
//	| Prompt     | id                     | string               | unique id, "<data_source>/<id in the source file>" by convention                                                |
//	| Prompt     | data_source            | string, dict         | dataset name chosen per input file (math/dapo, ...); picks the verifier                                         |
//	| Prompt     | problem                | string               | problem statement (the source's problem or question field)                                                      |
//	| Prompt     | answer                 | string               | reference final answer                                                                                          |
//	| Prompt     | solution               | optional string      | worked solution when the source has one; written as null when empty                                            |
//	| Prompt     | extra                  | optional string      | the source row's other fields as one JSON object                                                                |
//	| EvalRecord | run                    | string, dict         | run name                                                                                                        |
//	| EvalRecord | checkpoint             | string, dict         | checkpoint evaluated (its directory name)                                                                       |
//	| EvalRecord | policy_version         | int64                | policy version of the checkpoint                                                                                |
//	| EvalRecord | benchmark              | string, dict         | benchmark name (aime24, math500, ...)                                                                           |
//	| EvalRecord | problem_id             | string               | problem id within the benchmark                                                                                 |
//	| EvalRecord | sample_index           | int32                | sample number for Avg@k, 0..k-1                                                                                 |
//	| EvalRecord | seed                   | int64                | sampling seed of this sample                                                                                    |
//	| EvalRecord | prompt                 | string               | rendered prompt text                                                                                            |
//	| EvalRecord | response               | string               | generated text                                                                                                  |
//	| EvalRecord | extracted              | string               | final answer extracted from the response ("" when none was found)                                               |
//	| EvalRecord | answer                 | string               | reference answer                                                                                                |
//	| EvalRecord | correct                | bool                 | verifier verdict                                                                                                |
//	| EvalRecord | score                  | float32              | verifier score (1 correct, 0 wrong; partial credit where a verifier gives it)                                   |
//	| EvalRecord | verdict                | string               | verifier's short reason for its verdict                                                                         |
//	| EvalRecord | finish_reason          | string, dict         | eos, stop, length or error                                                                                      |
//	| EvalRecord | response_len           | int32                | response length in tokens                                                                                       |
//	| EvalRecord | latency_ms             | float32              | generation wall time in milliseconds                                                                            |
//
// Trajectory.Validate checks the row invariants above; ReadStep and
// ReadShard run it on every trajectory they return. token_source is stored
// as INT32 with the INT(8) logical type. The exact Parquet schema of each
// row type, with the encodings the writer uses, is pinned by
// testdata/*.schema.golden; a change to it is deliberate and, when a
// column changes meaning, comes with a new SchemaVersion.
//
// # Step layout
//
// A step of a run is one directory, on local disk or gs://:
//
//	<run>/step-000007/                rundir.Step(run, 7)
//	<run>/step-000007/shards/part-00000.parquet
//	<run>/step-000007/shards/part-00001.parquet
//	<run>/step-000007/_MANIFEST.json  written last
//
// Shards are zstd-compressed Parquet files of RowGroupRows rows per row
// group, named part-*.parquet (ShardName gives the conventional names; a
// sink may name them after its bundles). The manifest lists every shard by
// path relative to the step directory, with its row count, byte size and
// sha256, plus the step's kind (trajectories, prompts or eval), run, step,
// policy version and totals. The same layout holds any set of shards:
// prompt datasets and eval results are committed the same way.
//
// ShardWriter writes trajectories with a bulk columnar writer (the reader's
// twin: whole token slices appended per column, list levels written as RLE
// runs, v2 data pages of up to 1 MiB of values) and prompts and eval records
// with parquet-go's generic writer; both give the schema and encodings
// pinned by the golden files. Pages are compressed by internal/zstdcodec:
// libzstd's fast mode where the binary has cgo, klauspost's pure-Go encoder
// otherwise.
//
// # Commit protocol
//
// Writers write and close every shard first (ShardWriter.Close syncs local
// files; on gs:// an object exists only once its upload completes), then
// write _MANIFEST.json in one atomic step (CommitManifest: a synced
// temporary file renamed over the name locally, a single object write on
// gs://). A step without a manifest is not committed: its writer is still
// running or died, and readers refuse it with an error wrapping
// ErrNoManifest that names the directory. Files not listed in the manifest
// (left over by a killed attempt) are ignored. Readers verify each listed
// shard's size and sha256 before decoding it; a mismatch is a
// *rundir.ChecksumError naming the file.
//
// # Readers
//
// ReadStep reads a whole step verified, decoding shards in parallel;
// OpenStep and ReadShard (or Step.ReadFile and ReadShardBytes) read one shard
// at a time. Trajectories are decoded by a bulk columnar reader
// (ReadTrajectoriesBulk) that reads each column chunk's pages into one
// slice per column and row group and hands rows sub-slices of it, without
// per-row reflection; prompts and eval records use parquet-go's generic
// reader.
package schemas
