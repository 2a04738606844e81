package vllmserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/recommended.log holds the lines CheckRecommendedLog reads from
// the log of vLLM 0.32.0 started as Options.Recommended starts it (TCMalloc
// and Intel OpenMP preloaded) on the tiny Qwen3, on an AMD EPYC with 2
// cores: its thread binding, its compilation config and warm-up.
func TestCheckRecommendedLog(t *testing.T) {
	good, err := os.ReadFile("testdata/recommended.log")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := CheckRecommendedLog(write("good.log", string(good))); err != nil {
		t.Errorf("the log of a recommended start: %v", err)
	}
	// What vLLM's CPU worker logs when TCMalloc was not preloaded.
	missing := string(good) + "(Worker pid=9) WARNING 12-06 20:15:22 [cpu_worker.py:114] libtcmalloc is not found in LD_PRELOAD. For best performance, please follow the section `set LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ to setup required pre-loaded libraries.\n"
	if err := CheckRecommendedLog(write("missing.log", missing)); err == nil || !strings.Contains(err.Error(), "libtcmalloc is not found") {
		t.Errorf("a log saying TCMalloc is missing: %v", err)
	}
	eager := strings.ReplaceAll(string(good), "enforce_eager=False", "enforce_eager=True")
	if err := CheckRecommendedLog(write("eager.log", eager)); err == nil || !strings.Contains(err.Error(), "enforce_eager=False") {
		t.Errorf("an eager start: %v", err)
	}
}
