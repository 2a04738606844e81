package archcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// beamSDK is the module path of the Beam Go SDK; every package under it
// counts as Beam (core, runners, io, transforms...).
const beamSDK = "github.com/apache/beam/sdks/v2"

// configPackages load or hold configuration that other stages read, so
// they must link no Beam: runconfig (a run's configuration), evalconfig
// (an evaluation's) and the Beam-free halves of the transforms that
// configure them.
var configPackages = []string{"runconfig", "evalconfig", "transforms/prompts/promptsource", "transforms/trajectories/guidance"}

// storagePkg may reach Beam: it reads and writes files (local and gs://)
// through Beam's filesystem packages, and only through those
// (storageBeam).
const storagePkg = "internal/storage"

// storageBeam are the Beam packages storagePkg may import.
var storageBeam = []string{"/go/pkg/beam/io/filesystem", "/go/pkg/beam/io/filesystem/gcs", "/go/pkg/beam/util/gcsx"}

// isBeam reports whether import path p is a package of the Beam SDK.
func isBeam(p string) bool { return p == beamSDK || strings.HasPrefix(p, beamSDK+"/") }

// depGraph is the import graph of the non-test files of pkgs and of
// every package they reach (go list -deps), by import path.
func depGraph(t *testing.T, mod string, pkgs ...string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages' dependencies with")
	}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	g := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	if len(g[mod+"/"+pkgs[0]]) == 0 {
		t.Fatalf("go list -deps ./%s lists no imports of it:\n%s", pkgs[0], out)
	}
	return g
}

// beamChains lists how from reaches Beam in g other than through stop: one
// line per package that imports Beam, the shortest import chain to it
// followed by its Beam imports, sorted. Paths under mod are written
// relative to it.
func beamChains(g map[string][]string, mod, from, stop string) []string {
	short := func(p string) string { return strings.TrimPrefix(p, mod+"/") }
	parent := map[string]string{from: ""}
	queue := []string{from}
	var out []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == stop {
			continue
		}
		var beam []string
		for _, q := range g[p] {
			if isBeam(q) {
				beam = append(beam, q)
				continue
			}
			if _, seen := parent[q]; !seen {
				parent[q] = p
				queue = append(queue, q)
			}
		}
		if len(beam) == 0 {
			continue
		}
		chain := []string{short(p)}
		for a := parent[p]; a != ""; a = parent[a] {
			chain = append(chain, short(a))
		}
		slices.Reverse(chain)
		out = append(out, strings.Join(chain, " -> ")+" -> "+strings.Join(beam, ", "))
	}
	slices.Sort(out)
	return out
}

// Loading a configuration links no Beam: the dependency closure of each
// configuration package holds no package of the Beam SDK but those
// internal/storage reaches through Beam's filesystem packages (go list
// -deps ./runconfig shows them: the filesystem, gcs, gcsx and what they
// import of Beam's core runtime, log and model protos; never the beam
// package itself, a runner or a transform).
func TestConfigurationLinksNoBeam(t *testing.T) {
	mod := modulePath(t)
	g := depGraph(t, mod, configPackages...)
	for _, p := range configPackages {
		if v := beamChains(g, mod, mod+"/"+p, mod+"/"+storagePkg); len(v) > 0 {
			t.Errorf("%s links Beam; move the configuration types these chains reach Beam for into a Beam-free package (as promptsource, guidance and evalconfig are), or the Beam code out of the package the chain passes:\n  %s",
				p, strings.Join(v, "\n  "))
		}
	}
	st, ok := g[mod+"/"+storagePkg]
	if !ok {
		t.Fatalf("%s is not in the closure of %v: the exception for it has nothing left to allow; drop it", storagePkg, configPackages)
	}
	for _, q := range st {
		if isBeam(q) && !slices.Contains(storageBeam, strings.TrimPrefix(q, beamSDK)) {
			t.Errorf("%s imports %s; of Beam it may import only the filesystem packages %v, which every configuration package links through it", storagePkg, q, storageBeam)
		}
	}
}

// The check sees what it is about: a transforms package with Beam DoFns
// imported by a configuration package is reported with the chain that
// reaches it, and nothing is reported through internal/storage.
func TestConfigurationLinksNoBeamSeesTheGraph(t *testing.T) {
	const mod = "example.com/m"
	g := map[string][]string{
		mod + "/runconfig":                       {mod + "/transforms/prompts/promptsource", mod + "/internal/storage", "fmt"},
		mod + "/transforms/prompts/promptsource": {mod + "/transforms/trajectories", mod + "/internal/storage"},
		mod + "/transforms/trajectories":         {beamSDK + "/go/pkg/beam", beamSDK + "/go/pkg/beam/register", mod + "/internal/storage"},
		mod + "/internal/storage":                {beamSDK + "/go/pkg/beam/io/filesystem"},
	}
	want := []string{"transforms/prompts/promptsource -> transforms/trajectories -> " + beamSDK + "/go/pkg/beam, " + beamSDK + "/go/pkg/beam/register"}
	if got := beamChains(g, mod, mod+"/transforms/prompts/promptsource", mod+"/internal/storage"); !slices.Equal(got, want) {
		t.Errorf("from promptsource: %q, want %q", got, want)
	}
	want[0] = "runconfig -> " + want[0]
	if got := beamChains(g, mod, mod+"/runconfig", mod+"/internal/storage"); !slices.Equal(got, want) {
		t.Errorf("from runconfig: %q, want %q", got, want)
	}
	g[mod+"/transforms/prompts/promptsource"] = g[mod+"/transforms/prompts/promptsource"][1:]
	if got := beamChains(g, mod, mod+"/runconfig", mod+"/internal/storage"); len(got) != 0 {
		t.Errorf("through internal/storage only: %q, want nothing", got)
	}
}
