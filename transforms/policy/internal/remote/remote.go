// Package remote holds what the network policy clients share: reading the
// bearer token and TLS settings of an endpoint URI, and retry back-off.
package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
)

// Settings are the query parameters of a remote endpoint URI that are not
// addresses: token_env or token_file (the bearer token, never in the URI
// itself), ca (a PEM file of the CA that signed the server's certificate,
// for TLS), max_retries (attempts after the first on an overloaded or
// unreachable server, default 5).
type Settings struct {
	Token      string
	CAFile     string
	MaxRetries int
}

// Known are the query parameter names Parse consumes.
var Known = []string{"token_env", "token_file", "ca", "max_retries"}

// Parse reads the settings of q and removes their parameters from it.
func Parse(q url.Values) (Settings, error) {
	s := Settings{MaxRetries: 5, CAFile: q.Get("ca")}
	if v := q.Get("max_retries"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return s, fmt.Errorf("max_retries=%q must be a count >= 0", v)
		}
		s.MaxRetries = n
	}
	env, file := q.Get("token_env"), q.Get("token_file")
	switch {
	case env != "" && file != "":
		return s, errors.New("give the token by token_env or by token_file, not both")
	case env != "":
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return s, fmt.Errorf("environment variable %s (token_env) is not set or empty", env)
		}
		s.Token = v
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return s, fmt.Errorf("reading token_file %s: %w", file, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return s, fmt.Errorf("token_file %s must hold one non-empty line", file)
		}
		s.Token = v
	}
	for _, k := range Known {
		q.Del(k)
	}
	return s, nil
}

// TLS returns the client TLS configuration: the system roots, or the CA of
// CAFile when set.
func (s Settings) TLS() (*tls.Config, error) { return secure.ClientTLS(s.CAFile) }

// Wait sleeps before retry attempt (0 for the first retry): the hint when
// positive, else 100ms doubling up to 5s, with jitter; it returns ctx's
// error when ctx ends first.
func Wait(ctx context.Context, attempt int, hint time.Duration) error {
	d := hint
	if d <= 0 {
		d = min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)
		d = d/2 + rand.N(d/2+1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
