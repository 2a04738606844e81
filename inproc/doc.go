// Package inproc serves policy.Client (transforms/policy) from the
// learner's engine in the same process, under the URI scheme "inproc".
//
// Two forms of URI resolve:
//
//   - inproc:///abs/path/to/checkpoint opens a committed checkpoint
//     directory or a plain Hugging Face model directory
//     (learner/checkpoint.LoadServed: config.json, model.safetensors or
//     shards, in float32, bfloat16 or float16; its tokenizer.json, or the
//     query tokenizer=builtin or tokenizer=/path/to/tokenizer.json) and
//     starts an engine whose policy version is the checkpoint's
//     trainer_state.json policy_version (0 for a Hugging Face directory). Engine settings come from the
//     query: max_batch, max_queue, max_context, session_tokens. The query
//     lora=/path/to/adapter samples with a PEFT LoRA adapter on that base,
//     merged into a copy of its weights (Loaded.WithAdapter); the engine's
//     policy version is then the adapter's.
//   - inproc:gs://bucket/path/to/checkpoint does the same for a checkpoint
//     on remote storage (any scheme of internal/storage), same query.
//   - inproc://name reaches an engine that this process made available
//     with Serve(name, e), as a training loop does for the engine it
//     reloads after every update.
//
// Engines opened from a checkpoint are shared by every client of the same
// URI in the process (many Beam DoFn instances share one engine and its
// batch) and closed when the last client closes. Linking this package
// (import _ ".../inproc") registers the scheme.
package inproc

// TrainMaxBatch is the sequences the in-process rollout engine of aipo
// train decodes together (OpenEngine; the memory plan counts its
// attention caches for as many).
const TrainMaxBatch = 256
