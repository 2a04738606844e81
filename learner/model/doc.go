// Package model is the CPU reference of the learner's decoder-only
// transformer (the Llama / Qwen2 family): parameters under Hugging Face
// names, a forward pass that yields per-token log-probabilities of target
// tokens over packed sequences, and the matching backward pass.
//
// Every layer is a forward/backward function pair over flat float32 arrays
// with its shapes in a comment; matrix multiplies go through learner/blas,
// everything else is spread across cores with parallelFor.
package model
