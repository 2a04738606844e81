package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Kind classifies a failed attempt.
type Kind string

// Failure kinds.
const (
	KindTimeout     Kind = "timeout"      // the attempt ran past its timeout
	KindConnection  Kind = "connection"   // refused, reset or closed connection
	KindHTTP5xx     Kind = "http_5xx"     // server error
	KindHTTP429     Kind = "http_429"     // rate limited
	KindHTTP4xx     Kind = "http_4xx"     // request rejected (bad request, auth); not retried
	KindMalformed   Kind = "malformed"    // the response would not parse
	KindEmpty       Kind = "empty"        // a well-formed response without an answer
	KindUnavailable Kind = "unavailable"  // the service says it cannot answer now (gRPC Unavailable and similar)
	KindRejected    Kind = "rejected"     // the service refused the request (gRPC InvalidArgument, Unauthenticated, ...); not retried
	KindBreakerOpen Kind = "breaker_open" // the circuit breaker refused the call
	KindCanceled    Kind = "canceled"     // the caller's context ended
	KindInternal    Kind = "internal"     // anything else; not retried
)

// Kinds lists every kind, in a fixed order (for reports).
var Kinds = []Kind{KindTimeout, KindConnection, KindHTTP5xx, KindHTTP429, KindHTTP4xx, KindMalformed,
	KindEmpty, KindUnavailable, KindRejected, KindBreakerOpen, KindCanceled, KindInternal}

// Retryable reports whether an attempt that failed with kind k is worth
// repeating.
func (k Kind) Retryable() bool {
	switch k {
	case KindTimeout, KindConnection, KindHTTP5xx, KindHTTP429, KindMalformed, KindEmpty, KindUnavailable:
		return true
	}
	return false
}

// Error is a classified failure.
type Error struct {
	Kind Kind
	// Status is the HTTP status or gRPC code, when there was one.
	Status int
	// RetryAfter is the server's requested wait (HTTP Retry-After), if any.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Kind)
	}
	return string(e.Kind) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a classified error.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// ErrBreakerOpen is the cause of a call refused by an open circuit breaker.
var ErrBreakerOpen = errors.New("circuit breaker open: the endpoint failed repeatedly; calls resume after the cool-down")

// Classify returns err as an *Error: an *Error inside err is returned as is;
// context deadlines are timeouts, context cancellation is canceled; network
// failures (refused, reset, unexpected EOF, net.Error timeouts) are
// connection or timeout; everything else is internal.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var ge *Error
	if errors.As(err, &ge) {
		return ge
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindTimeout, Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Kind: KindCanceled, Err: err}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return &Error{Kind: KindConnection, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return &Error{Kind: KindTimeout, Err: err}
		}
		return &Error{Kind: KindConnection, Err: err}
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return &Error{Kind: KindConnection, Err: err}
	}
	return &Error{Kind: KindInternal, Err: err}
}

// HTTPKind classifies an HTTP status code of a failed response.
func HTTPKind(status int) Kind {
	switch {
	case status == 429:
		return KindHTTP429
	case status == 408:
		return KindTimeout
	case status >= 500:
		return KindHTTP5xx
	case status >= 400:
		return KindHTTP4xx
	}
	return KindMalformed // a 1xx/3xx where a JSON answer was expected
}
