// Package guard makes remote calls resilient: a concurrency limit per
// endpoint, a timeout per attempt, retries with exponential backoff and full
// jitter on retryable errors only, a circuit breaker, and counters.
//
// It is generic over the call's result type ([Do]) so that it can wrap any
// client: the collaborator agents of a rollout, and policy endpoints.
//
// Errors are classified into a [Kind] ([Classify]): clients turn what they
// know (an HTTP status, a gRPC code, a response that would not parse) into an
// [*Error]; context deadlines and network failures are recognised here.
// Retryable kinds: timeout, connection, http_5xx, http_429, malformed, empty,
// unavailable. Not retryable: http_4xx (a request the server rejects will be
// rejected again: a bad request, a wrong key), rejected, breaker_open,
// canceled, internal.
//
// The circuit breaker counts consecutive failures of retryable kinds only;
// any answer from the endpoint, including a 4xx, shows that it is alive and
// resets the count. After Failures consecutive failures it opens and refuses
// calls for Cooldown; then one probe is let through (half-open): its success
// closes the breaker, its failure opens it again for another Cooldown.
package guard
