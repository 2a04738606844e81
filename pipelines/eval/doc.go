// Package eval scores a policy on benchmark files the way the paper reports
// results: n samples per problem at temperature 1.0, top-p 1.0 and a 16384
// token budget by default, verified per sample, and summarised as Avg@n,
// Pass@k and maj@k with standard errors (transforms/metrics).
//
// A run is described by an evalconfig.Config (YAML, see configs/eval*.yaml;
// the benchmarks' presets, verifiers and templates are defined there, and a
// training run's held-out benchmarks are the same evalconfig.Benchmark). Run
// resolves every benchmark and reads its file in the driver (through
// transforms/prompts' promptfile readers with the benchmark's field
// mapping), splits each benchmark into chunks of ChunkSize problems, and
// runs a Beam pipeline (prism unless Beam's --runner says otherwise) over
// the chunks not yet committed. Each chunk is one element: its worker
// renders every prompt with the benchmark's template as a chat turn
// (learner/tokenizer's chat format, or a raw template tokenised by the
// policy), samples n responses through any policy.Open URI (inproc://,
// grpc://, http:// for vLLM and SGLang), scores them (transforms/verify for
// answers, transforms/sandbox for code), writes one Parquet shard of
// schemas.EvalRecord rows and commits the chunk's _MANIFEST.json.
//
// With sampling.greedy, each problem also gets one greedy response
// (temperature 0, sample index GreedySample), scored apart from its n
// samples: the report's greedy accuracy, and the share of greedy responses
// (and of samples) that call a collaborator by writing an agent's tag.
// It is how a task's splits are scored during training (eval.splits: the
// demo's seen and unseen entities), the same path as every benchmark.
//
// Layout of the output directory:
//
//	<out>/records/<benchmark>/chunk-000003/_MANIFEST.json, shards/part-*.parquet
//	<out>/report.json, report.md, report.png
//
// Resumption: a chunk is the unit of commit. A rerun plans the same chunks,
// skips those whose manifest exists (after checking that it was written
// with the same settings: every manifest carries a fingerprint of the
// benchmark's file, mapping, template, chat format, sampling and policy),
// and evaluates the rest; a killed run loses at most the chunks in flight.
// The report is always computed from every committed chunk, so it is the
// same whether a run finished in one go or in several.
//
// Reports: Report holds per-benchmark scores (and per-subset ones, such as
// MATH500 by subject and level), written as JSON, a Markdown table in the
// layout of the paper's Table 1 (benchmarks as columns, one row per
// evaluated policy), and a PNG bar chart; Compare sets several reports side
// by side with deltas against the first.
package eval
