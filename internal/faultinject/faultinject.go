// Package faultinject makes HTTP handlers fail the way flaky model servers
// do, for fault tests: an error status, a stall, a reset connection, a
// malformed body.
package faultinject

import (
	"net"
	"net/http"
	"time"
)

// Failures an endpoint can show.
const (
	Status500 = "500"       // HTTP 500 with an OpenAI-shaped error body
	Stall     = "stall"     // no answer for a while, then 503
	Reset     = "reset"     // the connection is reset (RST) without an answer
	Malformed = "malformed" // a truncated JSON body with status 200
)

// Fail answers r with the failure kind; a stall lasts stall or until the
// client gives up. It reports false for an unknown kind (nothing written).
func Fail(w http.ResponseWriter, r *http.Request, kind string, stall time.Duration) bool {
	switch kind {
	case Status500:
		http.Error(w, `{"error":{"message":"injected internal error"}}`, http.StatusInternalServerError)
	case Stall:
		select {
		case <-time.After(stall):
		case <-r.Context().Done():
		}
		http.Error(w, "too late", http.StatusServiceUnavailable)
	case Reset:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = c.Close()
			}
		}
	case Malformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","choices":[{"message":{"content":`))
	default:
		return false
	}
	return true
}
