// Package serve hosts the learner's engine as a network service: the gRPC
// service aipo.v1.Policy (schemas/proto/aipo/v1/policy.proto, with server
// reflection) and an OpenAI-compatible HTTP API, the two that `aipo serve`
// listens on. It serves one of our committed checkpoints or a plain
// Hugging Face model directory as downloaded (config.json,
// model.safetensors or shards, tokenizer.json; f32, bf16 or f16), with the
// weights of model.safetensors (see inproc.LoadCheckpoint).
//
// gRPC: Generate streams the sampled token ids and log-probs of a prefix;
// Continue appends tokens to a session's conversation (the prefix plus
// output of its previous call, kept by the server) and resumes, reusing
// the engine's KV cache; Release, Tokenize, Detokenize, Reload and Health
// complete it.
//
// HTTP: POST /v1/completions (text or token-id prompts, several prompts, n
// samples each, logprobs, stop, stop_token_ids, seed, max_tokens,
// temperature, top_p, top_k, SSE streaming), POST /v1/chat/completions
// (the tokenizer's chat format, logprobs, streaming), GET /v1/models and
// GET /v1/models/{id}, GET /health, GET /metrics (Prometheus' text format:
// aipo_serve_requests_total by endpoint and code, the
// aipo_serve_request_duration_seconds histogram, aipo_serve_queue_depth,
// aipo_serve_active_sequences, aipo_serve_generated_tokens_total, whose rate
// is tokens/s, and aipo_serve_policy_version), and vLLM's POST /tokenize and
// POST /detokenize. Every
// choice carries its token ids (prompt_token_ids, token_ids, as vLLM
// returns them with return_token_ids) and the policy version that sampled
// it (aipo_policy_version; the response's own field and the
// X-Aipo-Policy-Version header give the oldest version among its choices;
// on a stream, whose headers go out before its choices finish, the header
// is the version served when the request was admitted, the same unless a
// reload comes between).
// Log-probabilities are those of the policy itself (the log softmax of the
// raw logits, before temperature and top-p), for the sampled tokens and
// for the alternatives asked for: completions' logprobs N gives, per
// position, the N most likely tokens and the sampled one in top_logprobs
// (a token-to-log-prob object, most likely first, up to N+1 entries);
// chat's top_logprobs N gives the N most likely per content entry; N is at
// most 20 (MaxLogprobs). The gRPC API returns the sampled tokens' only. Text
// stops before a matching stop string, as in the OpenAI API, unless
// include_stop_str_in_output is set; token_ids always hold every sampled
// token. Errors have the OpenAI shape {"error":{"message","type","param",
// "code"}}. Parameters the sampler does not implement (logit_bias, the
// presence, frequency and repetition penalties, tools and tool_choice,
// functions, response_format, guided decoding, echo, best_of) are refused
// with a 400 naming them unless they hold their neutral value; max_tokens
// may not exceed the context.
//
// Load: the engine's bounded queue turns into HTTP 429 (with Retry-After)
// and gRPC RESOURCE_EXHAUSTED; a client that goes away cancels its
// request. Reload, by RPC or by watching a run directory for a newer
// committed checkpoint, swaps the weights between engine steps: requests
// in flight finish on the weights they started with and name that
// version. Shutdown stops accepting, lets requests in flight finish within
// a grace period, then closes the engine.
//
// Bounds (Options, and the flags of aipo serve): a request body, and a
// gRPC request message, of at most MaxBodyBytes (by default 32 bytes per
// token of the context plus 1 MiB; 413 body_too_large naming the limit
// and --max-body-bytes). Text prompts and chat contents whose byte length
// alone shows they cannot fit the context (a token stands for at most
// tokenizer.MaxTokenBytes bytes) are refused as context_length_exceeded
// before they are tokenized, so that a long prompt costs about three times
// its size, not the size of its tokenization. Headers must arrive within
// HeaderTimeout and the body within BodyTimeout of the handler's start
// (408 request_timeout, connection closed); the body deadline is lifted
// once the body is read, so it never cuts a response. Each write of a
// response has WriteTimeout, so a client that stops reading is cut off
// while a stream that is read runs as long as it needs (http.Server's own
// ReadTimeout and WriteTimeout would bound the whole request). Keep-alive
// connections close after IdleTimeout. Each listener holds at most
// MaxConns connections; further ones wait in the listen backlog until one
// closes. One client IP may have MaxClientRequests generation requests in
// flight (completions and chat, Generate and Continue together); beyond
// that it gets 429 too_many_client_requests with Retry-After, or
// RESOURCE_EXHAUSTED. gRPC closes connections idle for IdleTimeout, bounds
// the handshake by HeaderTimeout, takes MaxClientRequests+16 concurrent
// calls per connection and disconnects peers that ping more often than
// every 20 s.
//
// LoRA (Options.LoRA, aipo serve --lora): a PEFT adapter is served beside
// the base under its own name, as vLLM serves --lora-modules; GET
// /v1/models lists it with the base as its parent, HTTP requests naming it
// and every gRPC call sample with it, and Reload of an adapter directory
// replaces it. It is merged into a copy of the base's weights at load
// (docs/lora-serving.md says why).
//
// Security: an optional bearer token is checked on every gRPC call and
// every HTTP endpoint except GET /health (compared in constant time, never
// logged); TLS is optional on both listeners.
package serve
