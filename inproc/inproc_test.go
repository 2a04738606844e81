package inproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
	"github.com/aipo-rl/aipo/transforms/policy"
)

func testModel(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{ModelType: "qwen2", HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, VocabSize: tokenizer.BuiltinVocabSize, MaxPositionEmbeddings: 128,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, HiddenAct: "silu"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func same(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestServedEngine(t *testing.T) {
	ctx := ctxT(t)
	e, err := engine.New(testModel(t), tokenizer.Builtin(), 7, engine.Config{Name: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := Serve("trainloop", e); err != nil {
		t.Fatal(err)
	}
	defer Withdraw("trainloop")
	c, err := policy.Open(ctx, "inproc://trainloop")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prompt, err := c.Tokenize(ctx, "<|bos|>hello", true)
	if err != nil {
		t.Fatal(err)
	}
	if prompt[0] != int32(tokenizer.Builtin().BOS()) || len(prompt) != 6 {
		t.Fatalf("Tokenize with special tokens gave %v", prompt)
	}
	params := sampling.Params{Temperature: 1, TopP: 0.9, MaxTokens: 12, Seed: 3, StopStrings: []string{"zz"}}
	got, err := c.Generate(ctx, policy.Request{Prefix: prompt, Params: params, Session: "conv"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Generate(ctx, engine.Request{Prefix: prompt, Params: sampling.Params{Temperature: 1, TopP: 0.9, MaxTokens: 12, Seed: 3, StopStrings: []string{"zz"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !same(got.Tokens, want.Tokens) || got.PolicyVersion != 7 || got.FinishReason != want.FinishReason || len(got.LogProbs) != len(got.Tokens) {
		t.Fatalf("client result %+v, engine result %+v", got, want)
	}
	text, err := c.Detokenize(ctx, prompt)
	if err != nil || text != "<|bos|>hello" {
		t.Fatalf("Detokenize = %q, %v", text, err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Model != "tiny" || info.PolicyVersion != 7 || info.VocabSize != tokenizer.BuiltinVocabSize || info.MaxContext != 128 || len(info.EOS) == 0 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	// The session's cache is reused by the next call, then released.
	if st := e.Stats(); st.Sessions != 1 {
		t.Fatalf("engine keeps %d sessions after a session request, want 1", st.Sessions)
	}
	c.Release(ctx, "conv")
	if st := e.Stats(); st.Sessions != 0 {
		t.Fatalf("engine keeps %d sessions after Release, want 0", st.Sessions)
	}
	// The client follows a replacement of the served engine.
	e2, err := engine.New(testModel(t), tokenizer.Builtin(), 8, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if err := Serve("trainloop", e2); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Info(ctx); info.PolicyVersion != 8 {
		t.Fatalf("after Serve of a new engine the client sees version %d, want 8", info.PolicyVersion)
	}
	Withdraw("trainloop")
	if _, err := c.Generate(ctx, policy.Request{Prefix: prompt}); err == nil || !strings.Contains(err.Error(), "no engine served") {
		t.Fatalf("Generate after Withdraw: %v", err)
	}
	if _, err := policy.Open(ctx, "inproc://nobody"); err == nil || !strings.Contains(err.Error(), "inproc.Serve") {
		t.Fatalf("Open of an unknown name: %v", err)
	}
	if err := Serve("a/b", e); err == nil {
		t.Fatal("Serve accepted a name with a slash")
	}
}

// saveCheckpoint writes m with the built-in tokenizer as a committed
// checkpoint of policy version 3.
func saveCheckpoint(t *testing.T, dir string, m *model.Model) {
	t.Helper()
	tok, err := tokenizer.Builtin().Files()
	if err != nil {
		t.Fatal(err)
	}
	st := checkpoint.TrainerState{Step: 3, PolicyVersion: 3, RunID: "test"}
	if err := trainer.SaveCheckpoint(context.Background(), dir, m, tok, []byte("{}"), st); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointEngineShared(t *testing.T) {
	ctx := ctxT(t)
	m := testModel(t)
	dir := filepath.Join(t.TempDir(), "step-000003")
	saveCheckpoint(t, dir, m)
	uri := "inproc://" + dir + "?max_batch=8"
	a, err := policy.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	ea, _ := a.(*client).get()
	eb, _ := b.(*client).get()
	if ea != eb {
		t.Fatal("two clients of one checkpoint URI got different engines")
	}
	info, err := a.Info(ctx)
	if err != nil || info.PolicyVersion != 3 || info.Model != "step-000003" {
		t.Fatalf("Info = %+v, %v; want version 3 from trainer_state.json and the directory's name", info, err)
	}
	prompt := []int32{257, 65, 66}
	got, err := b.Generate(ctx, policy.Request{Prefix: prompt, Params: sampling.Params{MaxTokens: 10}})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := engine.New(m, nil, 3, engine.Config{EOS: info.EOS})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	want, err := direct.Generate(ctx, engine.Request{Prefix: prompt, Params: sampling.Params{MaxTokens: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if !same(got.Tokens, want.Tokens) {
		t.Fatalf("engine loaded from the checkpoint sampled %v, the saved model %v", got.Tokens, want.Tokens)
	}
	a.Close()
	a.Close() // idempotent
	if _, err := b.Generate(ctx, policy.Request{Prefix: prompt, Params: sampling.Params{MaxTokens: 2}}); err != nil {
		t.Fatalf("the engine closed while a client still held it: %v", err)
	}
	if _, err := a.Generate(ctx, policy.Request{Prefix: prompt}); !errors.Is(err, errClosed) {
		t.Fatalf("Generate on a closed client: %v", err)
	}
	b.Close()
	if _, err := eb.Generate(ctx, engine.Request{Prefix: prompt}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("after the last client closed, the engine answered %v, want ErrClosed", err)
	}
	mu.Lock()
	left := len(opened)
	mu.Unlock()
	if left != 0 {
		t.Fatalf("%d shared engines left open after every client closed", left)
	}
}

func TestCheckpointErrors(t *testing.T) {
	ctx := ctxT(t)
	m := testModel(t)
	dir := filepath.Join(t.TempDir(), "ck")
	saveCheckpoint(t, dir, m)
	// Our checkpoint whose writer has not committed it (trainer_state.json,
	// no marker) is refused; a directory without a marker but with a
	// config.json is read as a Hugging Face directory, and its config
	// checked; an empty one is neither.
	uncommitted, plain, empty := t.TempDir(), t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(uncommitted, "config.json"), filepath.Join(uncommitted, "trainer_state.json"), filepath.Join(plain, "config.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]string{
		"inproc://" + uncommitted:            "not committed",
		"inproc://" + plain:                  plain + "/config.json: model_type is missing",
		"inproc://" + empty:                  "no config.json, so not a Hugging Face model directory",
		"inproc://" + dir + "?max_batch=x":   "positive integer",
		"inproc://" + dir + "?temperature=1": "unknown query parameter",
		"inproc://host/some/path":            "neither a served engine",
	}
	for uri, want := range cases {
		if c, err := policy.Open(ctx, uri); err == nil || !strings.Contains(err.Error(), want) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Open(%s) error = %v, want one mentioning %q", uri, err, want)
		}
	}
	// A failed load is not cached: the same URI opens once it is fixed.
	mu.Lock()
	left := len(opened)
	mu.Unlock()
	if left != 0 {
		t.Fatalf("%d failed loads stayed cached", left)
	}
}

// EngineDType: on the CPU ResolveDType's rule (bfloat16 for a bfloat16
// checkpoint at least AutoBF16MinWidth wide where the CPU multiplies it
// natively), on a device that holds bfloat16 the checkpoint's dtype for
// auto whatever the width; an explicit request is kept where it can run,
// and what cannot run plans as float32.
func TestEngineDType(t *testing.T) {
	native, _ := model.BF16DecodeAvailable()
	cpuBF16 := DTypeF32
	if native {
		cpuBF16 = DTypeBF16
	}
	for _, c := range []struct {
		requested string
		stored    checkpoint.DType
		width     int
		cpu       bool
		want      string
	}{
		{"", checkpoint.BF16, 1024, true, cpuBF16},
		{DTypeAuto, checkpoint.BF16, 64, true, DTypeF32},
		{DTypeAuto, checkpoint.F32, 1024, true, DTypeF32},
		{DTypeBF16, checkpoint.F32, 64, true, cpuBF16},
		{DTypeF32, checkpoint.BF16, 1024, true, DTypeF32},
		{"", checkpoint.BF16, 64, false, DTypeBF16},
		{DTypeAuto, checkpoint.F32, 1024, false, DTypeF32},
		{DTypeBF16, checkpoint.F32, 64, false, DTypeBF16},
		{DTypeF32, checkpoint.BF16, 1024, false, DTypeF32},
		{"half", checkpoint.BF16, 1024, false, DTypeF32},
	} {
		if got := EngineDType(c.requested, c.stored, c.width, c.cpu); got != c.want {
			t.Errorf("EngineDType(%q, %s, width %d, cpu %v) = %q, want %q", c.requested, c.stored, c.width, c.cpu, got, c.want)
		}
	}
	if _, err := resolveDeviceDType("half", checkpoint.BF16); err == nil || !strings.Contains(err.Error(), "auto, bfloat16 or float32") {
		t.Errorf("resolveDeviceDType(half): %v, want an error naming the values", err)
	}
}
