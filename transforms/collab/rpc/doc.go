// Package rpc serves a collaborator set over gRPC (service
// aipo.v1.Collaborator, schemas/proto/aipo/v1/collaborator.proto) and
// implements the client side as a collaborator (kind grpc).
//
// Authentication is an optional bearer token, checked in constant time by a
// server interceptor on every method. The transport is plain text unless
// the server has a TLS certificate (ServeTLS; `aipo collaborators serve
// --tls-cert FILE --tls-key FILE`) and the client's endpoint is
// grpcs://HOST:PORT, which verifies the server's certificate against the
// role's tls_ca_file or the system roots. Over plain text, bind the server
// to a loopback address (the default of `aipo collaborators serve`): a
// token sent over plain text on a shared network can be read by anyone on
// the path.
//
// gRPC status codes are classified for retries (package guard):
// Unavailable, ResourceExhausted, Aborted, Internal and Unknown are
// retryable; DeadlineExceeded is a timeout; the others (InvalidArgument,
// Unauthenticated, PermissionDenied, NotFound, ...) are not retried.
package rpc
