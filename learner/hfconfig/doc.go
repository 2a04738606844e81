// Package hfconfig is the one Go type of a Hugging Face config.json for the
// decoder families the learner runs (llama, including Llama 3.x, qwen2 and
// qwen3): it decodes the keys the learner uses, keeps every other key
// verbatim and in order, validates in one place and derives the
// architecture description (Arch) that the model code builds from.
//
// It imports nothing of this module, so that checkpoint, model and
// everything above them share it.
package hfconfig
