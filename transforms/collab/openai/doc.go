// Package openai implements collaborators (kind openai) over the
// OpenAI-compatible chat completions API served by vLLM, SGLang, the
// llama.cpp server and hosted APIs: one endpoint, model and prompt template
// per role.
//
// Each call renders a system prompt and a user message from the role's
// templates (text/template; fields .Query, .Noisy, .Documents; the built-in
// ones are in prompts/) and posts one chat completion request with the
// query's seed. The Knowledge Agent works as in ZeroSearch: the noise
// schedule decides, from the query's seed, whether it must write useful or
// misleading documents, and the user message tells the model which.
//
// Failures are classified for retries (package guard): HTTP 5xx, 429 and
// 408, timeouts, broken connections, bodies that are not the expected JSON
// and responses without an answer (no choices, no content) are retryable;
// other 4xx (a bad request, a wrong key) are not. The API key is sent as a
// bearer token and never appears in errors.
package openai
