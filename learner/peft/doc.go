// Package peft reads and writes LoRA adapters in the layout of Hugging
// Face PEFT's save_pretrained, so that an adapter aipo trains loads with
// PeftModel.from_pretrained, vLLM's LoRA loading and any other tool that
// reads PEFT checkpoints, and an adapter trained elsewhere continues here.
//
// A directory holds adapter_config.json (the LoRA settings and the base
// model's name) and adapter_model.safetensors, whose keys name each adapted
// linear layer as PEFT does:
//
//	base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight  [r, in]
//	base_model.model.model.layers.3.self_attn.q_proj.lora_B.weight  [out, r]
//
// The adapted layer computes y = x Wᵀ + s · (x Aᵀ) Bᵀ with s = alpha / r
// (alpha / √r under rank-stabilised LoRA). Merge folds s · B A into the
// base's weights for users who serve a single model.
//
// A LoRA run's checkpoints carry the same files under learner/checkpoint's
// marker (CheckpointFiles, FromCheckpoint); a committed one is served
// merged onto the base it names (checkpoint.ServeAdapter, set here), and
// MergeDir writes the merged Hugging Face directory (aipo lora merge).
//
// The package knows the decoder families the learner trains (Llama, Qwen2,
// Qwen3): the attention projections q_proj, k_proj, v_proj, o_proj and the
// MLP's gate_proj, up_proj, down_proj. It refuses, with the setting named,
// what it does not implement rather than reading it wrongly: DoRA, bias
// training, modules_to_save, per-layer rank or alpha patterns and
// fan_in_fan_out.
package peft
