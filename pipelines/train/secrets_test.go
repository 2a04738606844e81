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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/demotask"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/pipelines/runconfig"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
	"github.com/aipo-rl/aipo/transforms/collab/openai"
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
	task                             *demotask.Task
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
			cfg, err := DemoConfig(DemoOptions{Quick: true, RunDir: runDir})
			if err != nil {
				t.Fatal(err)
			}
			task, err := demotask.New(*cfg.Data.DemoTask)
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
			ws := QuickWarmStart()
			ws.Model.Context = 192
			if warm != "" {
				if err := os.CopyFS(checkpoint.Dir(runDir, 0), os.DirFS(warm)); err != nil {
					t.Fatal(err)
				}
			}

			out := startCapture(t)
			rep, runErr := RunDemo(context.Background(), DemoOptions{
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
				warm = checkpoint.Dir(runDir, 0)
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
				trajs, _, err := schemas.ReadStep[schemas.Trajectory](context.Background(), schemas.StepDir(runDir, k))
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
		case d.Name() == schemas.ManifestName:
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
