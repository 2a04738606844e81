package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/peft"
)

func init() {
	register(command{
		name:    "lora merge",
		summary: "write the Hugging Face model directory of a base with a LoRA adapter merged into its weights",
		run:     runLoRAMerge,
	})
}

func runLoRAMerge(args []string) error {
	fs := flag.NewFlagSet("lora merge", flag.ContinueOnError)
	adapter := fs.String("adapter", "", "the adapter: a PEFT adapter directory (adapter_config.json and adapter_model.safetensors), such as a LoRA run's checkpoint (required)")
	base := fs.String("base", "", "the base model's directory (Hugging Face layout or a checkpoint); default: the one the adapter names (base_model_name_or_path; a LoRA run's <run>/lora-base)")
	out := fs.String("out", "", "the directory to write the merged model into, local or gs:// (required; must not hold a model already)")
	dtype := fs.String("dtype", "auto", "the merged weights' dtype: auto (the base's), float32, bfloat16 or float16")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo lora merge --adapter DIR --out DIR [--base DIR] [--dtype auto]\n\n"+
			"Folds the adapter into its base's weights (W + alpha/r * B A, in float32, as PEFT's\n"+
			"merge_and_unload) and writes a plain Hugging Face model directory: config.json, the\n"+
			"weights and the tokenizer files, for tools that serve one model (docs/lora.md).\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *adapter == "" || *out == "" || fs.NArg() > 0 {
		return usageError("--adapter DIR and --out DIR are required, and no arguments are taken (see --help)")
	}
	var dt checkpoint.DType
	switch *dtype {
	case "auto":
	case "float32":
		dt = checkpoint.F32
	case "bfloat16":
		dt = checkpoint.BF16
	case "float16":
		dt = checkpoint.F16
	default:
		return usageError("--dtype %q: use auto, float32, bfloat16 or float16", *dtype)
	}
	if _, err := os.Stat(*out + "/" + checkpoint.ConfigName); err == nil {
		return usageError("--out %s holds a model already (config.json): give a new directory", *out)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := peft.MergeDir(ctx, *adapter, *out, peft.MergeOptions{Base: *base, DType: dt}); err != nil {
		return runError("%s", errText(err))
	}
	fmt.Fprintf(os.Stderr, "aipo lora merge: %s on its base written to %s\n", *adapter, *out)
	return nil
}
