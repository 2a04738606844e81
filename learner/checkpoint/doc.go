// Package checkpoint reads and writes model weights and training
// checkpoints as named float32 tensors.
//
// It speaks three formats:
//
//   - Hugging Face safetensors, one file or sharded with
//     model.safetensors.index.json; F32, BF16 and F16 load (converted to
//     float32), F32, BF16 and F16 save.
//   - llama2.c's legacy .bin (seven int32 header fields, then float32
//     arrays), converted to Hugging Face tensor names and to Hugging Face's
//     rotate-half RoPE layout (see LoadLlama2C).
//   - Our checkpoint directory: a complete Hugging Face model directory
//     (config.json, model.safetensors or shards in the model's dtype,
//     tokenizer files, generation_config.json) plus master.safetensors
//     (the float32 master weights, when the model's dtype is not float32),
//     optimizer.bin (or, written by the ranks of a data-parallel group,
//     optimizer-0000i-of-0000n.bin, each rank's share, listed by
//     optimizer.index.json) and trainer_state.json, committed by a final
//     _COMMITTED marker. A directory without the marker does not exist as far as Load
//     and Latest are concerned. A serving checkpoint
//     (Checkpoint.ServingOnly) leaves the training state out
//     (master.safetensors, optimizer.bin): what policy servers load, at a
//     fraction of the size; Full tells the two apart. Remove deletes a
//     committed checkpoint so that no reader sees part of one.
//
// Load, for training, returns the float32 masters when the checkpoint has
// them (a resumed run continues bit for bit); LoadServed returns the
// weights of model.safetensors, as vLLM or transformers see them, and also
// reads a plain Hugging Face directory without our extras. The model's
// dtype is config.json's torch_dtype (ModelDType); LoadWeights, reading a
// downloaded directory, sets it to the dtype the weights are stored in, so
// that a run seeded from bf16 weights writes bf16 checkpoints.
//
// config.json is hfconfig.Config (Config is an alias): a checkpoint writes
// back the config it was given with every key, torch_dtype naming the dtype
// of the saved weights. Other files of a Hugging Face directory that travel
// with the weights (tokenizer files, generation_config.json) are copied
// through Checkpoint.Tokenizer unchanged.
//
// Tensors carry Hugging Face names (model.layers.0.self_attn.q_proj.weight)
// and row-major shapes ([out, in] for linear layers). Paths may be local or
// gs:// (through internal/storage).
package checkpoint
