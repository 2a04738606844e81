// Package collab defines the collaborator agents a policy may call during
// AIPO rollouts (Verify, Knowledge, Reasoning), their configuration, and the
// resilience and caching that wrap every call.
//
// A [Collaborator] answers one [Query]. A [Set] holds one per [Agent] and is
// built from a [Config] by [NewSet]; each role's kind is implemented in a
// subpackage that registers itself ([RegisterKind]):
//
//   - builtin-demo (package builtin): deterministic agents for the embedded
//     demo task, with no model server;
//   - openai (package openai): an LLM behind an OpenAI-compatible chat
//     completions endpoint (vLLM, SGLang, llama.cpp server, hosted APIs);
//   - grpc (package rpc): a remote `aipo collaborators serve`, in plain
//     text or over TLS (endpoint grpcs://HOST:PORT, RoleConfig.TLSCAFile).
//
// Import package kinds to register all three.
//
// Every collaborator of a Set is wrapped by [Resilient]: a concurrency limit
// and circuit breaker shared by the roles of one endpoint, a per-attempt
// timeout, retries with backoff on retryable errors (package guard), a
// per-run cache, and counters ([Set.Stats]). A call that still fails becomes
// an [Answer] whose Status is schemas.StatusError or schemas.StatusTimeout
// and whose Text is a short fixed notice; the caller gets a Go error only
// when its own context ends.
//
// Reproducibility: the caller derives [Query.Seed] from the run seed, step,
// prompt, sample and call ([DeriveSeed]); collaborators draw their random
// choices (the Knowledge Agent's noise) from it alone, so the same query
// with the same seed gets the same answer.
//
// Cache: answers with status ok are kept per run. For a collaborator that
// reports itself deterministic ([Deterministic]: its answer depends on the
// query text only) the key is run + agent + text, so every trajectory asking
// the same thing shares one call. For the others (a noisy Knowledge Agent,
// an LLM sampling at a temperature above zero, a remote service) the key
// also holds the step and seed: only a repeated call (a retried bundle, a
// re-run step) hits, and it gets the same answer as the first time.
// Failed calls are never cached. Concurrent identical calls share one
// upstream call.
package collab
