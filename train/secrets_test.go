package train

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/pipelines/rollout"
	"github.com/aipo-rl/aipo/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
	"github.com/aipo-rl/aipo/transforms/collab/openai"
	"github.com/aipo-rl/aipo/transforms/collab/rpc"
	"github.com/aipo-rl/aipo/transforms/policy"
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

// plantedLLM is an OpenAI-compatible chat server standing in for the
// Knowledge Agent. It serves only requests that carry "Authorization:
// Bearer <key>", and on purpose fails some of them in ways that put the key
// into what the client reads: a 500 and a 401 whose error messages quote
// the key (as OpenAI's "Incorrect API key provided" does), and a reply whose
// content is the request's bearer token (as a debugging echo endpoint
// might answer).
type plantedLLM struct {
	key                              string
	task                             *demo.Task
	n, answered, failed, echoed, bad atomic.Int64
}

func (s *plantedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	auth := r.Header.Get("Authorization")
	w.Header().Set("Content-Type", "application/json")
	if auth != "Bearer "+s.key {
		s.bad.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, auth)
		return
	}
	switch n := s.n.Add(1); {
	case n%5 == 2:
		s.failed.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"message":"upstream failed while serving key %s","type":"server_error"}}`, s.key)
		return
	case n%7 == 4:
		s.failed.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s (revoked)","type":"invalid_request_error","code":"invalid_api_key"}}`, s.key)
		return
	case n%9 == 6:
		s.echoed.Add(1)
		writeChat(w, strings.TrimPrefix(auth, "Bearer ")) // the key, as the answer
		return
	}
	answer := "unknown"
	for _, e := range s.task.Entities() {
		if strings.Contains(string(body), e.Name) {
			answer = strconv.Itoa(e.Value)
		}
	}
	s.answered.Add(1)
	writeChat(w, answer)
}

// writeChat answers in vLLM's chat completion shape.
func writeChat(w http.ResponseWriter, content string) {
	b, _ := json.Marshal(content)
	fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"kb","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":42,"total_tokens":43,"completion_tokens":1}}`, b)
}

// capture collects everything the process logs while a run is going: the
// slog default handler (which the standard log package and Beam's logger
// write through) and whatever is written to os.Stdout and os.Stderr.
type capture struct {
	mu               sync.Mutex
	buf              bytes.Buffer
	stdout, stderr   *os.File
	oldOut, oldErr   *os.File
	oldSlog          *slog.Logger
	stdoutN, stderrN string
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *capture) printf(format string, a ...any) { fmt.Fprintf(c, format+"\n", a...) }

func startCapture(t *testing.T) *capture {
	t.Helper()
	dir := t.TempDir()
	c := &capture{stdoutN: filepath.Join(dir, "stdout"), stderrN: filepath.Join(dir, "stderr")}
	var err error
	if c.stdout, err = os.Create(c.stdoutN); err != nil {
		t.Fatal(err)
	}
	if c.stderr, err = os.Create(c.stderrN); err != nil {
		t.Fatal(err)
	}
	c.oldOut, c.oldErr, c.oldSlog = os.Stdout, os.Stderr, slog.Default()
	os.Stdout, os.Stderr = c.stdout, c.stderr
	slog.SetDefault(slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(c.stop)
	return c
}

// stop restores the process's outputs and returns everything captured.
func (c *capture) stop() {
	if c.stdout == nil {
		return
	}
	slog.SetDefault(c.oldSlog)
	os.Stdout, os.Stderr = c.oldOut, c.oldErr
	c.stdout.Close()
	c.stderr.Close()
	c.stdout = nil
}

// text is all captured output; call after stop.
func (c *capture) text(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{c.stdoutN, c.stderrN} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b.Write(c.buf.Bytes())
	return b.String()
}

// TestPlantedKeysNeverLeak runs the quick demo with the Knowledge Agent as an
// LLM behind an OpenAI-compatible server that requires a planted API key,
// given once by environment variable and once by key file, and with calls
// failing on purpose. The key must appear nowhere: not in any file of the
// run directory (Parquet shards read as bytes and decoded, metrics, reports,
// run.yaml, checkpoints), not in the logs, progress or errors; run.yaml
// names the variable or the file, never the key.
func TestPlantedKeysNeverLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick demo twice")
	}
	base := t.TempDir()
	var warm string // the first run's warm start, reused by the second
	for _, via := range []string{"env", "file"} {
		t.Run(via, func(t *testing.T) {
			key := plantedKey(t)
			runDir := filepath.Join(base, via)
			cfg, err := demoConfig(demoOptions{Quick: true, RunDir: runDir})
			if err != nil {
				t.Fatal(err)
			}
			task, err := demo.SourcesTask(cfg.Data.Sources)
			if err != nil {
				t.Fatal(err)
			}
			llm := &plantedLLM{key: key, task: task}
			srv := httptest.NewServer(llm) // 127.0.0.1
			defer srv.Close()

			const envName = "AIPO_TEST_PLANTED_KB_KEY"
			keyFile := filepath.Join(t.TempDir(), "kb.key")
			if via == "env" {
				t.Setenv(envName, key)
			} else {
				if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mutate := func(c *runconfig.Config) {
				kb := *c.Collaborators.Knowledge
				kb.Kind, kb.Endpoint, kb.Model = collab.KindOpenAI, srv.URL+"/v1", "kb"
				kb.Backoff = collab.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
				kb.Timeout = 10 * time.Second
				if via == "env" {
					kb.APIKeyEnv = envName
				} else {
					kb.APIKeyFile = keyFile
				}
				c.Collaborators.Knowledge = &kb
				// Room for a whole key in an answer, so that an answer that
				// quotes it would reach the trajectories if not redacted.
				c.Policy.MaxResponseTokens, c.Rollout.AnswerTokenBudget = 128, 96
			}
			ws := demo.QuickWarmStart()
			ws.Model.Context = 192
			if warm != "" {
				if err := os.CopyFS(rundir.Checkpoint(runDir, 0), os.DirFS(warm)); err != nil {
					t.Fatal(err)
				}
			}

			out := startCapture(t)
			rep, runErr := runDemo(claimed(t, context.Background(), runDir), demoOptions{
				RunDir: runDir, Quick: true, Mutate: mutate, WarmStart: &ws,
				Log:      func(s string) { out.printf("log: %s", s) },
				Progress: func(e Event) { out.printf("progress: %+v learn=%+v eval=%+v", e, e.Learn, e.Eval) },
				WarmStartProgress: func(step, steps int, loss float64, elapsed time.Duration) {
					out.printf("warm start: %d/%d loss %v in %v", step, steps, loss, elapsed)
				},
			})
			out.stop()
			if runErr != nil {
				t.Fatalf("the run failed: %v", runErr)
			}
			if warm == "" {
				warm = rundir.Checkpoint(runDir, 0)
			}
			logs := out.text(t)
			logs += "\nreport:\n" + rep.Summary()

			// The failures did happen, and they reached the trajectories as
			// failed calls.
			if llm.answered.Load() == 0 || llm.failed.Load() == 0 || llm.echoed.Load() == 0 {
				t.Fatalf("the server answered %d, failed %d and echoed %d calls; want each at least once", llm.answered.Load(), llm.failed.Load(), llm.echoed.Load())
			}
			if llm.bad.Load() != 0 {
				t.Errorf("%d requests came without the planted key", llm.bad.Load())
			}
			t.Logf("the run: %d calls answered, %d failed on purpose, %d answered with the key", llm.answered.Load(), llm.failed.Load(), llm.echoed.Load())
			failedCalls := 0
			for k := int64(0); k < cfg.Run.Steps; k++ {
				trajs, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), rundir.Step(runDir, k))
				if err != nil {
					t.Fatal(err)
				}
				for _, tr := range trajs {
					for _, st := range tr.InteractionStatus {
						if st == schemas.StatusError {
							failedCalls++
						}
					}
				}
			}
			if failedCalls == 0 {
				t.Errorf("no trajectory records a failed Knowledge Agent call; the error paths were not exercised")
			}

			// run.yaml names where the key comes from, not the key.
			y, err := os.ReadFile(filepath.Join(runDir, "run.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			want := "api_key_env: " + envName
			if via == "file" {
				want = "api_key_file: " + keyFile
			}
			if !strings.Contains(string(y), want) {
				t.Errorf("run.yaml does not record %q:\n%s", want, y)
			}

			logs += "\nerrors:\n" + directErrors(t, cfg, mutate, srv.URL)
			secrets := []string{key, strings.TrimPrefix(key, "sk-aipo-planted-")}
			leaks := scanRun(t, runDir, secrets)
			for _, s := range secrets {
				if strings.Contains(logs, s) {
					i := strings.Index(logs, s)
					leaks = append(leaks, fmt.Sprintf("captured logs: ...%s...", logs[max(0, i-120):i]))
				}
			}
			for _, l := range leaks {
				t.Errorf("the planted key leaked into %s", l)
			}
			t.Logf("%d failed calls in the trajectories; %d bytes of logs, progress, report and errors scanned", failedCalls, len(logs))
		})
	}
}

// directErrors calls the Knowledge Agent's client as the run configured it
// (key from the same variable or file) until the server has failed it with
// a 500, a 401 and an echo, and returns every error and answer as text;
// the resilience layer of a run turns such errors into notices, so they
// are checked here. A key file that is malformed must not show its content
// in the error either.
func directErrors(t *testing.T, cfg runconfig.Config, mutate func(*runconfig.Config), url string) string {
	t.Helper()
	ctx := context.Background()
	mutate(&cfg)
	var b strings.Builder
	key, err := cfg.Collaborators.Secret(*cfg.Collaborators.Knowledge)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "two-lines.key")
	if err := os.WriteFile(bad, []byte(key+"\n"+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := collab.ReadSecret("", bad); err == nil {
		t.Error("a key file of two lines was accepted")
	} else {
		fmt.Fprintf(&b, "%v\n", err)
	}
	c, err := openai.New(openai.Options{Agent: collab.Knowledge, Endpoint: url + "/v1", Model: "kb", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kinds := map[int]bool{}
	for i := 0; i < 64 && len(kinds) < 3; i++ {
		a, err := c.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: "lugr", Seed: uint64(i)})
		fmt.Fprintf(&b, "answer %+v error %v %+v %#v\n", a, err, err, err)
		switch ge := (*guard.Error)(nil); {
		case errors.As(err, &ge):
			kinds[ge.Status] = true
		case err == nil && strings.Contains(a.Text, "[redacted]"):
			kinds[0] = true
		}
	}
	if !kinds[http.StatusInternalServerError] || !kinds[http.StatusUnauthorized] || !kinds[0] {
		t.Errorf("direct calls met outcomes %v; want a 500, a 401 and an echoed key", kinds)
	}
	return b.String()
}

// plantedKey is a fresh key that cannot occur by chance.
func plantedKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "sk-aipo-planted-" + hex.EncodeToString(b)
}

// scanRun looks for each secret in every file under dir, as raw bytes, and
// in every row of every Parquet file, decoded: shards of committed steps
// through schemas.ReadStep, any other Parquet file as each row type. It
// returns the places that hold a secret.
func scanRun(t *testing.T, dir string, secrets []string) []string {
	t.Helper()
	ctx := context.Background()
	var leaks []string
	holds := func(b []byte) bool {
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				return true
			}
		}
		return false
	}
	files, decoded := 0, 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if holds(data) {
			leaks = append(leaks, rel)
		}
		switch {
		case d.Name() == rundir.ManifestName:
			rows, err := decodeStep(ctx, filepath.Dir(path))
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			decoded++
			if holds(rows) {
				leaks = append(leaks, filepath.Dir(rel)+" (decoded rows)")
			}
		case strings.HasSuffix(path, ".parquet"):
			rows := decodeAny(data)
			if rows == nil {
				return fmt.Errorf("%s: no row type decodes it", rel)
			}
			decoded++
			if holds(rows) {
				leaks = append(leaks, rel+" (decoded rows)")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if decoded == 0 || files < 10 {
		t.Fatalf("scanned %d files and decoded %d Parquet sets under %s; the run left less than expected", files, decoded, dir)
	}
	t.Logf("scanned %d files under %s, %d Parquet sets decoded", files, dir, decoded)
	return leaks
}

// decodeStep reads a committed step as the kind its manifest names and
// returns its rows as JSON.
func decodeStep(ctx context.Context, dir string) ([]byte, error) {
	m, err := schemas.ReadManifest(ctx, dir)
	if err != nil {
		return nil, err
	}
	var rows any
	switch m.Kind {
	case schemas.KindOf[schemas.Trajectory]():
		rows, _, err = schemas.ReadStep[schemas.Trajectory](ctx, dir)
	case schemas.KindOf[schemas.Prompt]():
		rows, _, err = schemas.ReadStep[schemas.Prompt](ctx, dir)
	case schemas.KindOf[schemas.EvalRecord]():
		rows, _, err = schemas.ReadStep[schemas.EvalRecord](ctx, dir)
	default:
		return nil, fmt.Errorf("unknown kind %q", m.Kind)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(rows)
}

// decodeAny decodes a Parquet file as every row type that reads it and
// returns the rows as JSON (nil when none does).
func decodeAny(b []byte) []byte {
	var out []byte
	add := func(rows any, err error) {
		if err == nil {
			j, _ := json.Marshal(rows)
			out = append(out, j...)
		}
	}
	add(schemas.ReadShardBytes[schemas.Trajectory](b))
	add(schemas.ReadShardBytes[schemas.Prompt](b))
	add(schemas.ReadShardBytes[schemas.EvalRecord](b))
	return out
}

// echoURL is an OpenAI-compatible server that fails in ways that put the
// request's URL (query included) and Authorization header into what a
// client reads: errors quoting them, a malformed answer quoting them, and
// an answer whose content is the URL.
type echoURL struct{ n atomic.Int64 }

func (s *echoURL) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	quoted, _ := json.Marshal("bad request " + r.URL.String() + " with " + r.Header.Get("Authorization"))
	switch r.URL.Path {
	case "/v1/models": // a policy server: the model list, then errors
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","max_model_len":64}]}`)
		return
	case "/v1/completions":
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error"}}`, quoted)
		return
	}
	switch s.n.Add(1) % 4 {
	case 1:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"server_error"}}`, quoted)
	case 2:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%s}}`, quoted)
	case 3:
		fmt.Fprintf(w, `{"choices":[{"message":{"content":%s}}`, quoted) // truncated JSON
	default:
		writeChat(w, r.URL.String())
	}
}

// TestQuerySecretsNeverLeak plants a secret in a query parameter that aipo
// does not define, in policy endpoints and in collaborator endpoints, and
// provokes every error on the way: a URI that does not parse, an unknown
// scheme, user information, the unknown parameter's rejection, an
// unreachable server, a server answering errors and malformed bodies that
// quote the request's URL and Authorization header, configuration checks,
// and the rollout manifest's policy_endpoint. The secret appears in no
// error (%v, %+v, %#v), no answer, no log line and no manifest value.
func TestQuerySecretsNeverLeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secret := plantedKey(t)
	token := plantedKey(t) // the policy's bearer token, given by token_env
	t.Setenv("AIPO_TEST_PLANTED_POLICY_TOKEN", token)
	secrets := []string{secret, strings.TrimPrefix(secret, "sk-aipo-planted-"), token, strings.TrimPrefix(token, "sk-aipo-planted-")}

	echo := &echoURL{}
	srv := httptest.NewServer(echo) // 127.0.0.1
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	gone := closed.Listener.Addr().String()
	closed.Close() // nothing listens there any more

	out := startCapture(t)
	var b strings.Builder
	record := func(what string, v any, err error) {
		fmt.Fprintf(&b, "%s: %v / %v %+v %#v\n", what, v, err, err, err)
	}
	expectErr := func(what string, err error, want string) {
		record(what, nil, err)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one mentioning %q", what, err, want)
		}
	}

	// Policy endpoints: every scheme rejects the unknown parameter, naming
	// it, and shows the URI masked.
	for _, uri := range []string{
		"http://" + srv.Listener.Addr().String() + "/v1?model=m&token=" + secret,
		"https://" + srv.Listener.Addr().String() + "/v1?model=m&x_api_key=" + secret + "&x_api_key=" + secret,
		"grpc://" + gone + "?token=" + secret,
		"grpcs://" + gone + "?auth=" + url.QueryEscape(secret) + "#" + secret,
		"inproc:///no/such/checkpoint?key=" + secret,
	} {
		_, err := policy.Open(ctx, uri)
		expectErr("policy.Open "+uri[:5], err, "")
		if err != nil && !strings.Contains(err.Error(), secure.Mask) && !strings.Contains(err.Error(), "unknown query parameter") {
			t.Errorf("policy.Open: %v names neither the masked URI nor the unknown parameter", err)
		}
	}
	for uri, want := range map[string]string{
		"http://127.0.0.1:1/v1?model=m&token=" + secret + "\x7f": "bad endpoint",
		"htp://127.0.0.1:1/v1?token=" + secret:                   "no client for scheme",
		"http://u:" + secret + "@127.0.0.1:1/v1":                 "user information",
		"http://" + secret + "@127.0.0.1:1/v1":                   "user information",
		"http://127.0.0.1:1/v1?model=m&token=" + secret:          `unknown query parameter "token"`,
	} {
		_, err := policy.Open(ctx, uri)
		expectErr("policy.Open", err, want)
	}
	// A token given rightly (token_env) to a server that quotes the
	// request's Authorization header in its errors, and an unreachable
	// server.
	c, err := policy.Open(ctx, "http://"+srv.Listener.Addr().String()+"/v1?model=m&max_retries=0&token_env=AIPO_TEST_PLANTED_POLICY_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Generate(ctx, policy.Request{Prefix: []int32{1}, Params: sampling.Params{MaxTokens: 1}})
	expectErr("Generate against a quoting server", err, "400")
	record("result", res, nil)
	c.Close()
	_, err = policy.Open(ctx, "http://"+gone+"/v1?model=m&retry_budget=200ms&token_env=AIPO_TEST_PLANTED_POLICY_TOKEN")
	expectErr("policy.Open of an unreachable server", err, "refused")

	// The run configuration and the rollout's manifest.
	cfg, err := demoConfig(demoOptions{Quick: true, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Policy.Endpoint = "http://[::1/v1?token=" + secret
	expectErr("runconfig validation", bad.Validate(), "policy.endpoint")
	_, err = rollout.Spec(ctx, rollout.Options{Config: cfg, Policy: "htp://127.0.0.1:1/v1?token=" + secret})
	expectErr("rollout.Spec", err, "no client")
	spec, err := rollout.Spec(ctx, rollout.Options{Config: cfg, Policy: "http://127.0.0.1:1/v1?model=m&token=" + secret})
	if err != nil {
		t.Fatal(err)
	}
	meta := rollout.StaticMeta(rollout.Options{Config: cfg}, spec)
	record("manifest meta", meta, nil)
	if !strings.Contains(meta["policy_endpoint"], "token="+secure.Mask) {
		t.Errorf("manifest policy_endpoint %q does not show the parameter masked", meta["policy_endpoint"])
	}

	// Collaborator endpoints: an openai one sends its query to the server,
	// which quotes it back in errors and answers; an unreachable one; rpc
	// ones; and the configuration check.
	kb, err := openai.New(openai.Options{Agent: collab.Knowledge, Endpoint: srv.URL + "/v1?api-version=1&key=" + secret, Model: "kb", APIKey: token})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		a, err := kb.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: "lugr", Seed: uint64(i)})
		record("openai answer", a, err)
	}
	kb.Close()
	if echo.n.Load() < 8 {
		t.Errorf("the collaborator server saw %d calls, want 8", echo.n.Load())
	}
	unreachable, err := openai.New(openai.Options{Agent: collab.Knowledge, Endpoint: "http://" + gone + "/v1?key=" + secret, Model: "kb"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = unreachable.Answer(ctx, collab.Query{Agent: collab.Knowledge, Text: "lugr"})
	expectErr("openai unreachable", err, "refused")
	_, err = openai.New(openai.Options{Agent: collab.Knowledge, Endpoint: "ftp://h/v1?key=" + secret, Model: "kb"})
	expectErr("openai endpoint check", err, "http(s) URL")
	_, err = rpc.DialWith("grpc://127.0.0.1:1/path?token="+secret, collab.Knowledge, rpc.Credentials{})
	expectErr("rpc endpoint check", err, "host:port")
	if rc, err := rpc.DialWith(gone+"?token="+secret, collab.Knowledge, rpc.Credentials{}); err != nil {
		record("rpc dial", nil, err)
	} else {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := rc.Answer(actx, collab.Query{Agent: collab.Knowledge, Text: "lugr"})
		acancel()
		expectErr("rpc unreachable", err, "rpc")
		rc.Close()
	}
	role := collab.RoleConfig{Kind: collab.KindGRPC, Endpoint: "grpc://127.0.0.1:1?token=" + secret, TLSCAFile: "/etc/ca.pem"}
	_, err = collab.NewSet(ctx, collab.Config{Knowledge: &role}, collab.Env{})
	expectErr("collab config check", err, "grpcs://")

	out.stop()
	text := b.String() + "\nlogs:\n" + out.text(t)
	for _, s := range secrets {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("a planted secret leaked: ...%s...", text[max(0, i-200):min(len(text), i+len(s)+20)])
		}
	}
	if !strings.Contains(text, secure.Mask) || !strings.Contains(text, "[redacted]") {
		t.Errorf("no masked secret in what was checked; the cases did not carry one:\n%s", text)
	}
	t.Logf("%d bytes of errors, answers and logs checked", len(text))
}
