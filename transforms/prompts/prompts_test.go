package prompts

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/beamrun"
	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func TestMain(m *testing.M) { ptest.MainWithDefault(m, beamrun.Runner) }

// files are two small prompt files with good and bad rows.
var files = map[string]string{
	"mix.jsonl": strings.Join([]string{
		`{"id": "a", "question": "1+1?", "answer": 2, "level": 1}`,
		`not json`,
		`{"id": "b", "question": "no answer"}`,
		`{"id": "c", "question": "2+2?", "answer": "4"}`,
	}, "\n") + "\n",
	"arr.json": "[\n {\"problem\": \"3*3?\", \"answer\": 9.0},\n {\"problem\": \"\", \"answer\": 1}\n]\n",
}

func sources(dir string) []Source {
	return []Source{
		{Path: storage.Join(dir, "mix.jsonl"), DataSource: "toy"},
		{Path: storage.Join(dir, "arr.json"), Preset: "aime_1983_2023"},
	}
}

// reference reads the sources with the plain reader.
func reference(t *testing.T, srcs []Source) ([]schemas.Prompt, []DeadLetter) {
	t.Helper()
	var good []schemas.Prompt
	var dead []DeadLetter
	for _, s := range srcs {
		if _, err := promptfile.Read(context.Background(), s,
			func(p schemas.Prompt) error { good = append(good, p); return nil },
			func(d DeadLetter) error { dead = append(dead, d); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return good, dead
}

// runRead reads srcs in a pipeline, checks the prompts against the plain
// reader's and returns the dead letters written to deadPath.
func runRead(t *testing.T, srcs []Source, deadPath string) []DeadLetter {
	t.Helper()
	wantGood, wantDead := reference(t, srcs)
	if len(wantGood) != 3 || len(wantDead) != 3 {
		t.Fatalf("plain reader: %d good and %d dead, want 3 and 3: %v", len(wantGood), len(wantDead), wantDead)
	}
	p, s := beam.NewPipelineWithRoot()
	good, dead := Read(s, srcs...)
	want := make([]any, len(wantGood))
	for i, g := range wantGood {
		want[i] = g
	}
	passert.Equals(s, good, want...)
	n := WriteDeadLetters(s, deadPath, dead)
	passert.Equals(s, n, len(wantDead))
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	got, err := promptfile.ReadDeadLetters(context.Background(), deadPath)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(wantDead, func(i, j int) bool {
		if wantDead[i].File != wantDead[j].File {
			return wantDead[i].File < wantDead[j].File
		}
		return wantDead[i].Index < wantDead[j].Index
	})
	if len(got) != len(wantDead) {
		t.Fatalf("dead-letter file has %d letters, want %d", len(got), len(wantDead))
	}
	for i := range got {
		if got[i] != wantDead[i] {
			t.Errorf("dead letter %d = %+v, want %+v", i, got[i], wantDead[i])
		}
	}
	return got
}

func TestReadLocal(t *testing.T) {
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dead := runRead(t, sources(dir), filepath.Join(dir, "out", "dead.jsonl"))
	// Sorted by file: arr.json's empty problem first, then mix.jsonl's lines 2 and 3.
	want := []struct {
		file   string
		line   int64
		reason string
	}{{"arr.json", 3, promptfile.ReasonMissingProblem}, {"mix.jsonl", 2, promptfile.ReasonNotJSON}, {"mix.jsonl", 3, promptfile.ReasonMissingAnswer}}
	for i, w := range want {
		if filepath.Base(dead[i].File) != w.file || dead[i].Line != w.line || dead[i].Reason != w.reason {
			t.Errorf("dead letter %d = %s; want %s line %d %s", i, dead[i], w.file, w.line, w.reason)
		}
	}
}

func TestReadFakeGCS(t *testing.T) {
	// PublicHost 127.0.0.1 routes the client's object downloads (sent to
	// the emulator host) to the fake server's download handler.
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://"))
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "prompts"})
	ctx := context.Background()
	dir := "gs://prompts/data"
	for name, body := range files {
		if err := storage.WriteAtomic(ctx, storage.Join(dir, name), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	dead := runRead(t, sources(dir), "gs://prompts/out/dead.jsonl")
	if !strings.HasPrefix(dead[0].File, "gs://prompts/data/") {
		t.Errorf("dead letter names %q, want the gs:// path", dead[0].File)
	}
}

func TestTryReadRejectsBadSource(t *testing.T) {
	_, s := beam.NewPipelineWithRoot()
	if _, _, err := TryRead(s, Source{Path: "x.jsonl"}); err == nil || !strings.Contains(err.Error(), "data_source") {
		t.Errorf("TryRead without data_source: %v", err)
	}
	if _, _, err := TryRead(s); err == nil {
		t.Error("TryRead with no sources should fail")
	}
}
