package peertags

// Tag is a build tag of peer tests.
type Tag struct {
	Name  string
	Needs string // what its tests need, and what installs it
}

// Tags are the peer tags, in the order make test and the docs list them.
var Tags = []Tag{
	{"vllm", "a real vLLM server: vLLM 0.32's CPU build in the Python environment of scripts/vllm.sh"},
	{"torch", "PyTorch 2.13, transformers 5.19 and torchrun, from the environment of scripts/vllm.sh"},
	{"verl", "veRL 0.9.1's own loss and advantage code, in the environment of scripts/verl.sh"},
	{"tensorboard", "TensorBoard's own event reader, in the environment of scripts/pychecks.sh"},
	{"trl", "TRL 1.16's GRPOTrainer, in the environment of scripts/trl.sh (make setup-bench; make bench runs it)"},
	{"flink", "a Flink 1.19.3 cluster and Beam 2.62.0's Flink and Spark job servers (Java; scripts/flink/cluster.sh and scripts/spark/job-server.sh install them), with bin/aipo-worker and bin/beam-boot as PROCESS workers"},
	{"portable", "bin/aipo-worker, bin/beam-boot and build/tools/prism: a PROCESS environment on a standalone portable job server (make worker beam-boot)"},
	{"llamacpp", "llama.cpp's llama-server, built by scripts/llama-server.sh"},
	{"duckdb", "Node.js and DuckDB's Node API (npm install in scripts/interop)"},
	{"openaisdk", "Node.js and the OpenAI Node SDK (npm install in scripts/openai-sdk)"},
	{"grpcurl", "grpcurl v1.9.3, built into build/tools by go install (the module proxy, once)"},
	{"netns", "root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2, to make network namespaces"},
	{"shareddata", "files of ../shared/data that are not committed: the Qwen3, Llama 3 and GGML tokenizers, stories260K, GSM8K's training split, DeepScaleR, the original AIME 2025 file"},
}

// Names are the tags' names, in Tags' order.
func Names() []string {
	names := make([]string, len(Tags))
	for i, t := range Tags {
		names[i] = t.Name
	}
	return names
}

// Lookup returns the tag named name.
func Lookup(name string) (Tag, bool) {
	for _, t := range Tags {
		if t.Name == name {
			return t, true
		}
	}
	return Tag{}, false
}
