// Package rpc serves a collaborator set over gRPC (service
// aipo.v1.Collaborator, schemas/proto/aipo/v1/collaborator.proto) and
// implements the client side as a collaborator (kind grpc).
//
// Authentication is an optional bearer token, checked in constant time by a
// server interceptor on every method. The transport is plaintext: bind the
// server to a loopback address (the default of `aipo collaborators serve`)
// or put it behind a TLS-terminating proxy; a token sent over plaintext on
// a shared network can be read by anyone on the path.
//
// gRPC status codes are classified for retries (package guard):
// Unavailable, ResourceExhausted, Aborted, Internal and Unknown are
// retryable; DeadlineExceeded is a timeout; the others (InvalidArgument,
// Unauthenticated, PermissionDenied, NotFound, ...) are not retried.
package rpc
