// Package llamaserver runs llama.cpp's llama-server for tests: the binary
// that scripts/llama-server.sh builds into build/tools (from the llama.cpp
// source npm's node-llama-cpp package bundles), the stories260K llama2.c
// checkpoint converted to GGUF with llama.cpp's own converter, and a
// stand-in for its tokenizer.
//
// stories260K's tokenizer (tok512) does not ship with it. Every check the
// tests make is on token ids, so a stand-in with SentencePiece's id layout
// serves: <unk>, <s>, </s> (0, 1, 2), the 256 byte tokens <0x00>..<0xFF>
// (3..258), then filler pieces up to 512. One change: the byte 0x20 slot
// (id 35) holds "▁", SentencePiece's space, because llama.cpp's tokenizer
// writes every space as "▁" before it falls back to bytes; with it, text
// encodes to id 3+b for each byte b on both llama-server and the byte-level
// tokenizer.json written beside (ByteLevel with add_prefix_space, for the
// space llama.cpp's SentencePiece tokenizer puts before a text), so that
// llama-server and aipo serve agree on every id.
package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// VocabSize is the stand-in vocabulary's size (stories260K's).
const VocabSize = 512

// EOS is the stand-in's end-of-sequence id (</s>).
const EOS = 2

// ContextLength is stories260K's context (its seq_len), each slot's.
const ContextLength = 512

// SkipEnv names the environment variable that lets tests skip when the
// llama-server binary is absent (AIPO_SKIP_LLAMA=1); without it a missing
// binary fails them. make test fails on the skip all the same (it is not on
// scripts/allowed-skips.txt): the variable serves plain go test.
const SkipEnv = "AIPO_SKIP_LLAMA"

// Binary returns build/tools/<name> (llama-server or
// llama-convert-llama2c-to-ggml). When it is absent the test fails, saying
// how to build it, unless AIPO_SKIP_LLAMA=1 asks to skip.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(testtools.RepoRoot(), "build", "tools", name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s is not built (build/tools/%s is absent) and %s=1: skipping the llama-server tests", name, name, SkipEnv)
	}
	t.Fatalf("%s is not built: build/tools/%s is absent; run scripts/llama-server.sh (scripts/setup.sh test and make test run it), or set %s=1 to skip the llama-server tests", name, name, SkipEnv)
	return ""
}

// piece is the stand-in's text of id (llama2.c's tokenizer.bin spelling:
// llama.cpp's converter writes spaces as "▁").
func piece(id int) string {
	switch {
	case id == 0:
		return "<unk>"
	case id == 1:
		return "<s>"
	case id == EOS:
		return "</s>"
	case id == 3+' ':
		return " "
	case id < 3+256:
		return fmt.Sprintf("<0x%02X>", id-3)
	}
	return fmt.Sprintf("[filler_%d]", id)
}

// WriteLlama2CVocab writes the stand-in in llama2.c's tokenizer.bin format
// (uint32 max_token_length, then per id float32 score, uint32 length and
// the bytes), the --copy-vocab-from-model input of llama.cpp's converter.
func WriteLlama2CVocab(path string) error {
	var b bytes.Buffer
	maxLen := 0
	for id := range VocabSize {
		maxLen = max(maxLen, len(piece(id)))
	}
	binary.Write(&b, binary.LittleEndian, uint32(maxLen))
	for id := range VocabSize {
		s := piece(id)
		binary.Write(&b, binary.LittleEndian, float32(0))
		binary.Write(&b, binary.LittleEndian, uint32(len(s)))
		b.WriteString(s)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// byteRune is GPT-2's byte-to-character table of byte-level BPE.
func byteRune() [256]rune {
	var t [256]rune
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}

// WriteHFTokenizer writes the stand-in as a Hugging Face tokenizer into
// dir: tokenizer.json (byte-level BPE, no merges: id 3+b is byte b, the
// fillers are never produced by encoding), tokenizer_config.json and
// generation_config.json (EOS </s>).
func WriteHFTokenizer(dir string) error {
	br := byteRune()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(br[b])] = 3 + b
	}
	for id := 3 + 256; id < VocabSize; id++ {
		vocab[piece(id)] = id
	}
	var added []map[string]any
	for id := range 3 {
		vocab[piece(id)] = id
		added = append(added, map[string]any{"id": id, "content": piece(id), "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	tj := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []string{}},
	}
	files := map[string]any{
		"tokenizer.json":         tj,
		"tokenizer_config.json":  map[string]any{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": false, "tokenizer_class": "PreTrainedTokenizerFast"},
		"generation_config.json": map[string]any{"bos_token_id": 1, "eos_token_id": EOS},
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// GGUF converts the llama2.c checkpoint model (stories260K.bin) with the
// stand-in vocabulary into a float32 GGUF file in a temporary directory,
// with llama.cpp's llama2.c converter.
func GGUF(t testing.TB, model string) string {
	t.Helper()
	conv := Binary(t, "llama-convert-llama2c-to-ggml")
	dir := t.TempDir()
	vocab := filepath.Join(dir, "tok512-standin.bin")
	if err := WriteLlama2CVocab(vocab); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, conv, "--copy-vocab-from-model", vocab, "--llama2c-model", model, "--llama2c-output-model", out)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", conv, err, b)
	}
	return out
}

// Server is a running llama-server.
type Server struct {
	// URL is its address, http://127.0.0.1:PORT.
	URL string
	// Log is the file its output goes to.
	Log string
}

// StartupTimeout bounds the wait for a started llama-server to answer
// /health with 200.
const StartupTimeout = 60 * time.Second

// Start runs llama-server on model (a GGUF file) on a free port of
// 127.0.0.1 until the test ends: the CPU, float32 weights and KV cache,
// flash attention off, parallel slots of the model's training context,
// and args appended. It fails the test when the server does not come up
// within StartupTimeout.
func Start(t testing.TB, model string, slots int, args ...string) *Server {
	t.Helper()
	bin := Binary(t, "llama-server")
	logPath := filepath.Join(t.TempDir(), "llama-server.log")
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := start(t, bin, model, port, slots, logPath, args)
		if err == nil {
			return s
		}
		// Another process may take the port between freePort and the
		// server's bind; try a few others.
		if attempt < 3 && strings.Contains(err.Error(), "bind") {
			continue
		}
		t.Fatal(err)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(t testing.TB, bin, model string, port, slots int, logPath string, extra []string) (*Server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-np", strconv.Itoa(slots), "-c", strconv.Itoa(ContextLength * slots), "-t", "2", "-fa", "off",
		"-ctk", "f32", "-ctv", "f32", "--no-webui", "--no-warmup",
		// llama.cpp's llama2.c converter writes a context length of 128
		// whatever the checkpoint's seq_len (stories260K: 512).
		"--override-kv", "llama.context_length=int:" + strconv.Itoa(ContextLength)}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), Log: logPath}
	deadline := time.Now().Add(StartupTimeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("llama-server exited before it answered /health (%v); its log:\n%s", err, tail(logPath))
		default:
		}
		if resp, err := hc.Get(s.URL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("llama-server did not answer /health with 200 within %s; its log:\n%s", StartupTimeout, tail(logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail is the last lines of a log file.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// LogProbTol bounds |llama-server's log-prob - aipo's| of one token on
// the same float32 weights: both compute in float32 with different
// matrix-multiply kernels and summation orders, and llama-server reports
// log(p) of a float32 softmax; over stories260K's 5 layers of width 64 the
// differences are a few 1e-6 to 6e-5, while a wrong RoPE layout, norm or
// weight transposition moves them by 1e-2 or more.
const LogProbTol = 1e-4

// SameLogProb reports whether two log-probs agree within LogProbTol.
func SameLogProb(a, b float32) bool {
	d := math.Abs(float64(a) - float64(b))
	return d <= LogProbTol
}
