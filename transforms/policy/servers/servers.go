// Package servers names the kinds of policy server aipo samples from and
// tells of new checkpoints. It is the one list of their names: the HTTP
// policy client's dialects (its server= parameter) and the weight-sync
// kinds (policy.sync.kind, transforms/policy/weightsync) both take theirs
// from here.
package servers

// The servers, as configurations name them.
const (
	Aipo     = "aipo"     // aipo serve
	VLLM     = "vllm"     // vLLM (and the generic OpenAI completions dialect)
	SGLang   = "sglang"   // SGLang
	LlamaCpp = "llamacpp" // llama.cpp's llama-server
)

// Server is one kind of policy server.
type Server struct {
	Name    string // as configurations name it (server=, policy.sync.kind)
	Display string // as messages name it
}

// All are the servers, in the order messages list them.
var All = []Server{
	{Aipo, "aipo serve"},
	{VLLM, "vLLM"},
	{SGLang, "SGLang"},
	{LlamaCpp, "llama-server"},
}

// Names are the names of All, in its order.
func Names() []string {
	out := make([]string, len(All))
	for i, s := range All {
		out[i] = s.Name
	}
	return out
}

// Display is the name messages give the server called name: name itself
// for one not in All.
func Display(name string) string {
	for _, s := range All {
		if s.Name == name {
			return s.Display
		}
	}
	return name
}
