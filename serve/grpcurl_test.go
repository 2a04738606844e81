//go:build grpcurl

package serve

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/internal/testtools"
)

// grpcurlVersion is the grpcurl the reflection test drives.
const grpcurlVersion = "v1.9.3"

// grpcurl returns a grpcurl binary: build/tools/grpcurl (scripts/setup.sh
// test puts it there) or one built now into a temporary directory.
func grpcurl(t *testing.T) string {
	if p := filepath.Join(testtools.RepoRoot(), "build", "tools", "grpcurl"); fileExists(p) {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("grpcurl test skipped: no go command to build grpcurl; run make setup-test")
	}
	dir := t.TempDir()
	cmd := exec.Command(goBin, "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@"+grpcurlVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building grpcurl %s, the gRPC client these tests drive aipo serve with, failed (no module proxy?): %v\n%s\nrun make setup-test, which builds it into build/tools", grpcurlVersion, err, out)
	}
	return filepath.Join(dir, "grpcurl")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// TestGrpcurl lists the services through server reflection and calls
// Health, Tokenize and a bad Generate with grpcurl.
func TestGrpcurl(t *testing.T) {
	bin := grpcurl(t)
	r := start(t, Options{Token: "tok-123"})
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"-plaintext", "-max-time", "20", "-H", "authorization: Bearer tok-123"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(r.grpcAddr, "list")
	if err != nil || !strings.Contains(out, "aipo.v1.Policy") || !strings.Contains(out, "grpc.reflection.v1.ServerReflection") {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	out, err = run(r.grpcAddr, "describe", "aipo.v1.Policy")
	if err != nil || !strings.Contains(out, "rpc Continue") || !strings.Contains(out, "stream .aipo.v1.GenerateResponse") {
		t.Fatalf("grpcurl describe: %v\n%s", err, out)
	}
	out, err = run("-d", "{}", r.grpcAddr, "aipo.v1.Policy/Health")
	var h struct {
		Status, Model, PolicyVersion string
		VocabSize, MaxContext        int
	}
	if err != nil || json.Unmarshal([]byte(out), &h) != nil || h.Status != "serving" || h.Model != "tiny" || h.PolicyVersion != "3" || h.MaxContext != 128 {
		t.Fatalf("grpcurl Health: %v\n%s", err, out)
	}
	out, err = run("-d", `{"text":"<|bos|>hi","special":true}`, r.grpcAddr, "aipo.v1.Policy/Tokenize")
	var tk struct{ Tokens []int32 }
	want, _ := r.srv.Engine().Tokenize("<|bos|>hi", true)
	if err != nil || json.Unmarshal([]byte(out), &tk) != nil || !slices.Equal(tk.Tokens, want) {
		t.Fatalf("grpcurl Tokenize: %v\n%s; want tokens %v", err, out, want)
	}
	out, err = run("-d", `{"prefix":[257,104],"params":{"maxTokens":3}}`, r.grpcAddr, "aipo.v1.Policy/Generate")
	if err != nil || strings.Count(out, `"tokens"`) != 3 || !strings.Contains(out, `"done": true`) || !strings.Contains(out, `"policyVersion": "3"`) {
		t.Fatalf("grpcurl Generate: %v\n%s", err, out)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"prefix":[257,99999]}`, "outside the vocabulary"},
		{`{"prefix":[1],"params":{"maxTokens":-5}}`, "max_tokens -5"},
	} {
		out, err = run("-d", bad.body, r.grpcAddr, "aipo.v1.Policy/Generate")
		if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, bad.want) {
			t.Fatalf("grpcurl Generate %s: %v\n%s; want InvalidArgument mentioning %q", bad.body, err, out, bad.want)
		}
	}
	cmd := exec.Command(bin, "-plaintext", "-max-time", "20", "-H", "authorization: Bearer wrong", r.grpcAddr, "list")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("grpcurl with a wrong token: %v\n%s", err, out)
	}
}
