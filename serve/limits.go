package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// defaultBytesPerToken and defaultBodySlack make the default body limit:
// room for several full-context prompts of ordinary text, or one of text
// that JSON escapes heavily, plus the rest of a request.
const (
	defaultBytesPerToken = 32
	defaultBodySlack     = 1 << 20
)

// Defaults of the bounds in Options (aipo serve's flags show them).
const (
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultWriteTimeout      = 60 * time.Second
	DefaultMaxConns          = 2048
	DefaultMaxClientRequests = 512
)

// defaultBodyBytes is the default limit of a request body for a context of
// maxContext tokens.
func defaultBodyBytes(maxContext int) int64 {
	return int64(maxContext)*defaultBytesPerToken + defaultBodySlack
}

// orDefault returns d when v is zero, v otherwise.
func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// clientLimiter counts the generation requests in flight per client IP.
type clientLimiter struct {
	max int // <= 0: no limit
	mu  sync.Mutex
	n   map[string]int
}

func newClientLimiter(max int) *clientLimiter {
	return &clientLimiter{max: max, n: map[string]int{}}
}

// acquire takes one of client's slots; release gives it back. It fails
// when client already holds max.
func (l *clientLimiter) acquire(client string) (release func(), ok bool) {
	if l.max <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[client] >= l.max {
		return nil, false
	}
	l.n[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n[client]--; l.n[client] <= 0 {
				delete(l.n, client)
			}
		})
	}, true
}

// inFlight is the number of client's slots taken.
func (l *clientLimiter) inFlight(client string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[client]
}

// clientIP is the host part of a remote address (the whole address when it
// has no port). Requests through a proxy share the proxy's address.
func clientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// admitHTTP takes a slot of the client of r for one completion or chat
// request, or returns the 429 that refuses it.
func (s *Server) admitHTTP(r *http.Request) (func(), *apiError) {
	ip := clientIP(r.RemoteAddr)
	release, ok := s.clients.acquire(ip)
	if !ok {
		return nil, &apiError{Status: http.StatusTooManyRequests, Message: s.clientLimitMessage(ip), Type: "rate_limit_error", Code: strp("too_many_client_requests")}
	}
	return release, nil
}

// admitGRPC takes a slot of the peer of ctx for one Generate or Continue
// call; ok is false when the peer holds all its slots.
func (s *Server) admitGRPC(ctx context.Context) (release func(), msg string, ok bool) {
	ip := "unknown"
	if p, found := peer.FromContext(ctx); found && p.Addr != nil {
		ip = clientIP(p.Addr.String())
	}
	release, ok = s.clients.acquire(ip)
	if !ok {
		return nil, s.clientLimitMessage(ip), false
	}
	return release, "", true
}

func (s *Server) clientLimitMessage(ip string) string {
	return fmt.Sprintf("client %s already has %d generation requests in flight (HTTP and gRPC together), the most this server takes from one client: wait for one to finish and retry, or raise the limit with aipo serve --max-client-requests", ip, s.clients.max)
}

// deadlineWriter sets the connection's write deadline before every write
// and flush of a response, so that a client that stops reading is cut off
// after that long, while a long stream that keeps being read is not.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) arm() { w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

func (w *deadlineWriter) Flush() {
	w.arm()
	w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bodyDeadline clears the read deadline of the body timeout once the body
// has been read to its end, so that the server's watch for a client that
// goes away keeps working during a long response.
type bodyDeadline struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// isTimeout reports whether err is a network timeout (a read deadline).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
