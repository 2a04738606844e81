// Package benchmarks holds the files the evaluation presets read (see
// MANIFEST.md beside this file for their sources, checksums and licences),
// embedded in the binary so that an evaluation needs no folder outside the
// repository: Dir writes them out once, checked against their sha256.
package benchmarks

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

//go:embed math code
var files embed.FS

// SHA256 is the checksum of every file, by its path under this directory
// (MANIFEST.md lists the same).
var SHA256 = map[string]string{
	"math/aime24/test.jsonl":            "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac",
	"math/aime25/test.escfixed.jsonl":   "c48ca244abea39e9875ad4b755f714b215a0c837114bc898220d6abcd33001aa",
	"math/amc23/test.jsonl":             "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4",
	"math/math500/test.jsonl":           "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
	"math/gsm8k/test.jsonl":             "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
	"code/mbpp/mbpp.jsonl":              "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f",
	"code/mbpp/sanitized-mbpp.json":     "7fec016546acaee11dbe14f9f0bb670e59f41919f7b522a59fba34871da78551",
	"code/humaneval/HumanEval.jsonl.gz": "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
}

// Files lists the embedded files, sorted.
func Files() []string {
	out := make([]string, 0, len(SHA256))
	for p := range SHA256 {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Read returns an embedded file, checked against its sha256.
func Read(rel string) ([]byte, error) {
	want, ok := SHA256[rel]
	if !ok {
		return nil, fmt.Errorf("benchmarks: no bundled file %s (bundled: %s)", rel, strings.Join(Files(), ", "))
	}
	b, err := files.ReadFile(rel)
	if err != nil {
		return nil, fmt.Errorf("benchmarks: %w", err)
	}
	if got := sum(b); got != want {
		return nil, fmt.Errorf("benchmarks: bundled %s has sha256 %s, want %s (the build is damaged)", rel, got, want)
	}
	return b, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var dirMu sync.Mutex

// Dir returns a local directory holding every bundled file at its path:
// <user cache dir>/aipo/benchmarks-<digest of the set>. Each call checks
// the files against their sha256 (a few milliseconds) and writes any that
// is missing or differs, atomically.
func Dir() (string, error) {
	dirMu.Lock()
	defer dirMu.Unlock()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	var all strings.Builder
	for _, p := range Files() {
		all.WriteString(p + " " + SHA256[p] + "\n")
	}
	dir := filepath.Join(base, "aipo", "benchmarks-"+sum([]byte(all.String()))[:12])
	return dir, writeOut(dir)
}

func writeOut(dir string) error {
	for _, rel := range Files() {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if b, err := os.ReadFile(p); err == nil && sum(b) == SHA256[rel] {
			continue
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("benchmarks: %w", err)
		}
		b, err := Read(rel)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("benchmarks: write the bundled files: %w", err)
		}
		tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
		if err != nil {
			return fmt.Errorf("benchmarks: write the bundled files: %w", err)
		}
		_, werr := tmp.Write(b)
		cerr := tmp.Close()
		if werr == nil && cerr == nil {
			werr = os.Rename(tmp.Name(), p)
		}
		if werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("benchmarks: write %s: %w", p, errors.Join(werr, cerr))
		}
	}
	return nil
}
