package weightsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/transforms/policy/internal/remote"
)

// httpServer is the control API of an HTTP policy server (SGLang, vLLM).
type httpServer struct {
	root  string // http://host:port
	token string
	retry remote.Retry
	hc    *http.Client
}

// openHTTP opens endpoint's control API. Its calls retry a server that
// is down or restarting for as long as one push may take (timeout), unless
// the endpoint's retry_budget or max_retries say otherwise: a server
// restarted by its supervisor mid-push is waited for, not given up on
// after the policy client's default budget.
func openHTTP(endpoint string, timeout time.Duration) (*httpServer, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("want http://host:port or https://host:port")
	}
	if u.User != nil {
		return nil, fmt.Errorf("the address carries user information; give the token with token_env or token_file")
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		return nil, fmt.Errorf("the address has a path (%s): give the server's root, http://host:port", p)
	}
	q := u.Query()
	budget, retries := q.Has("retry_budget"), q.Has("max_retries")
	set, err := remote.Parse(q)
	if err != nil {
		return nil, err
	}
	if !budget && timeout > 0 {
		set.Retry.Budget = timeout
	}
	if !retries && timeout > 0 {
		set.Retry.MaxRetries = math.MaxInt32 // the budget bounds them
	}
	if len(q) > 0 {
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("unknown query parameter %q (known: %s)", keys[0], strings.Join(remote.Known, ", "))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = set.TLS(); err != nil {
			return nil, err
		}
	}
	return &httpServer{root: u.Scheme + "://" + u.Host, token: set.Token, retry: set.Retry, hc: &http.Client{Transport: tr}}, nil
}

// call sends body (nil: none) as JSON and returns the status and body of
// the answer. Connection failures and 502, 503 and 504 answers (a server
// starting or restarting) are retried within ctx's deadline; other
// answers are returned as they are.
func (s *httpServer) call(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	rs := s.retry.Start()
	for {
		status, answer, err := s.once(ctx, method, path, payload)
		transient := err != nil && transientNet(err)
		if err == nil && (status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout) {
			transient = true
		}
		if !transient || !rs.Next(ctx, 0) {
			return status, answer, err
		}
	}
}

func (s *httpServer) once(ctx context.Context, method, path string, payload []byte) (int, []byte, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.root+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, secure.RedactError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// transientNet reports whether a request failed before the server could
// answer, in a way that passes when it is up again.
func transientNet(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *httpServer) close() error {
	s.hc.CloseIdleConnections()
	return nil
}
