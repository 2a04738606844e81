package weightsync

import (
	"context"
	"flag"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aipo-rl/aipo/transforms/policy/servers"
)

var update = flag.Bool("update", false, "rewrite the generated table of kinds in docs/operators.md")

const (
	docPath    = "../../../docs/operators.md"
	beginTable = "<!-- sync kinds: generated from weightsync.DocTable, do not edit -->\n"
	endTable   = "<!-- end sync kinds -->\n"
)

// The registry holds the kinds of this package, none first, and every
// example address is one its own kind accepts.
func TestKinds(t *testing.T) {
	if got, want := Names(nil), []string{KindNone, servers.Aipo, servers.SGLang, servers.VLLM}; !slices.Equal(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	for _, k := range Kinds() {
		if !k.Pushes() {
			continue
		}
		u, err := url.Parse(k.Example)
		if err != nil || u.Host == "" || !slices.Contains(k.Schemes, u.Scheme) {
			t.Errorf("kind %s: example %q is not an address of scheme %q", k.Name, k.Example, k.Schemes)
		}
	}
	if k, err := Lookup(""); err != nil || k.Name != KindNone || k.Pushes() {
		t.Errorf(`Lookup("") = %+v, %v; want kind none, which pushes nothing`, k, err)
	}
	if _, err := Lookup("triton"); err == nil || !strings.Contains(err.Error(), `"triton" is unknown: use none (`) {
		t.Errorf(`Lookup("triton") = %v, want an error listing the kinds`, err)
	}
	// Which kinds take load_format, name their versions and want a tied
	// head written: what validation and the training loop ask.
	for _, tc := range []struct {
		name                           string
		loadFormat, versions, tiedHead bool
	}{
		{KindNone, false, false, false},
		{servers.Aipo, false, true, false},
		{servers.SGLang, true, true, false},
		{servers.VLLM, false, false, true},
	} {
		k, err := Lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if k.LoadFormat != tc.loadFormat || k.NamesVersions != tc.versions || k.TiedHead != tc.tiedHead {
			t.Errorf("kind %s: load_format %v, names versions %v, tied head %v; want %v %v %v", tc.name, k.LoadFormat, k.NamesVersions, k.TiedHead, tc.loadFormat, tc.versions, tc.tiedHead)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("registering vllm twice did not panic")
		}
	}()
	Register(Kind{Name: servers.VLLM, Protocol: "again", Schemes: []string{"http"}, Example: "http://a:1",
		Open: func(context.Context, string, Options) (Replica, error) { return nil, nil }})
}

// A vLLM group names its versions only once every replica's push set
// them; an SGLang group always does.
func TestGroupNamesVersions(t *testing.T) {
	g := open(t, servers.VLLM, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, Options{})
	if g.NamesVersions() {
		t.Error("a vLLM group names its versions before any push")
	}
	for _, r := range g.replicas {
		r.(*vllmReplica).setVersioned(true)
	}
	if !g.NamesVersions() {
		t.Error("a vLLM group whose every push set the version does not name its versions")
	}
	g.replicas[1].(*vllmReplica).setVersioned(false)
	if g.NamesVersions() {
		t.Error("a vLLM group with one replica naming no version names its versions")
	}
	if !open(t, servers.SGLang, []string{"http://127.0.0.1:1"}, Options{}).NamesVersions() {
		t.Error("an SGLang group does not name its versions")
	}
}

// TestKindsDoc checks that docs/operators.md holds the table DocTable
// generates (-update rewrites it).
func TestKindsDoc(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, beginTable), strings.Index(doc, endTable)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", docPath, strings.TrimSpace(beginTable), strings.TrimSpace(endTable))
	}
	want := doc[:i+len(beginTable)] + DocTable() + doc[j:]
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Errorf("%s is stale: run go test ./transforms/policy/weightsync/ -run TestKindsDoc -update", docPath)
	}
}
