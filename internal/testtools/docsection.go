package testtools

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GeneratedSection holds a generated part of a document to the code that
// generates it. doc is a path from the repository root; the part is the
// lines between
//
//	<!-- NAME: generated, do not edit -->
//	<!-- end NAME -->
//
// (HTML comments, which Markdown does not show; docs/run-directory.md's
// layout table is marked the same way). It fails the test, saying how to
// refresh the document, when that span differs from content; when the
// test binary runs with -update it writes content there instead, as
// go/printer's golden files. The test package defines -update
// (flag.Bool("update", ...)) unless a package it imports does: Beam's
// Dataflow runner defines one of that name, which then serves.
func GeneratedSection(t testing.TB, doc, name, content string) {
	t.Helper()
	f := flag.Lookup("update")
	update := f != nil && f.Value.String() == "true"
	path := filepath.Join(RepoRoot(), doc)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := fmt.Sprintf("<!-- %s: generated, do not edit -->\n", name), fmt.Sprintf("<!-- end %s -->\n", name)
	text := string(b)
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no section %q: write the lines %q and %q where it goes, then run this test with -update", doc, name, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	i += len(begin)
	if text[i:j] == content {
		return
	}
	if update {
		if err := os.WriteFile(path, []byte(text[:i]+content+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote section %q of %s", name, doc)
		return
	}
	pkg, _ := os.Getwd()
	if rel, err := filepath.Rel(RepoRoot(), pkg); err == nil {
		pkg = "./" + filepath.ToSlash(rel)
	}
	t.Errorf("section %q of %s is not what the code generates; run `go test %s -run '^%s$' -update` to rewrite it. It should read:\n%s", name, doc, pkg, t.Name(), content)
}
