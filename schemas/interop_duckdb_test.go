//go:build duckdb

package schemas

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// duckdbReport is what scripts/interop/duckdb-check.mjs prints.
type duckdbReport struct {
	Rows                 int64            `json:"rows"`
	Files                map[string]int64 `json:"files"`
	TokenSourceMismatch  int64            `json:"token_source_mismatch"`
	LogprobsMismatch     int64            `json:"logprobs_mismatch"`
	TokenVersionMismatch int64            `json:"token_version_mismatch"`
	TokenVersions        map[string]int64 `json:"token_versions"`
	InteractionMismatch  int64            `json:"interaction_mismatch"`
	SpanOutside          int64            `json:"span_outside"`
}

// TestInteropDuckDB reads the shards with DuckDB through its Node API.
func TestInteropDuckDB(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	interop := filepath.Join(filepath.Dir(self), "..", "scripts", "interop")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: DuckDB interop needs Node.js 18+ (install nodejs, then run `make setup-test`)")
	}
	if _, err := os.Stat(filepath.Join(interop, "node_modules", "@duckdb", "node-api")); err != nil {
		t.Skipf("DuckDB's Node API is not installed in %s (run `make setup-test`)", interop)
	}
	dir, rows, m := writeInteropStep(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(interop, "duckdb-check.mjs"), dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node duckdb-check.mjs %s: %v\nstderr: %s", dir, err, stderr.String())
	}
	t.Logf("duckdb-check: %s", bytes.TrimSpace(stdout.Bytes()))
	var rep duckdbReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("duckdb-check output is not the expected JSON: %v\n%s", err, stdout.String())
	}
	if rep.Rows != m.Rows {
		t.Errorf("duckdb: %d rows, manifest says %d", rep.Rows, m.Rows)
	}
	for _, f := range m.Files {
		if got := rep.Files[filepath.Base(f.Path)]; got != f.Rows {
			t.Errorf("duckdb: %s has %d rows, manifest says %d", f.Path, got, f.Rows)
		}
	}
	if len(rep.Files) != len(m.Files) {
		t.Errorf("duckdb: read %d files, manifest lists %d", len(rep.Files), len(m.Files))
	}
	// Tokens per version as DuckDB counts them, against the rows written.
	want := map[string]int64{}
	for _, r := range rows {
		for _, v := range r.TokenVersions() {
			want[strconv.FormatInt(v, 10)]++
		}
	}
	if !maps.Equal(rep.TokenVersions, want) {
		t.Errorf("duckdb: tokens per version %v, want %v", rep.TokenVersions, want)
	}
	if rep.TokenSourceMismatch != 0 || rep.LogprobsMismatch != 0 || rep.TokenVersionMismatch != 0 || rep.InteractionMismatch != 0 || rep.SpanOutside != 0 {
		t.Errorf("duckdb: rows breaking invariants: %+v", rep)
	}
}
