package benchmarks

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every bundled file matches its checksum, and MANIFEST.md lists each with
// its size and sha256 and a source and licence
// (TestBundledFilesAreTheOfflineCopies: each is byte for byte the copy of
// ../shared/data it was taken from).
func TestBundledFilesMatchTheManifest(t *testing.T) {
	f, err := os.Open("MANIFEST.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 7 {
			continue
		}
		path, size, sha := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])
		want, ok := SHA256[path]
		if !ok {
			continue // the header
		}
		listed[path] = true
		b, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if sha != want || size != strconv.Itoa(len(b)) {
			t.Errorf("MANIFEST.md lists %s as %s bytes, sha256 %s; the file has %d bytes, sha256 %s", path, size, sha, len(b), want)
		}
		if strings.TrimSpace(cells[4]) == "" || strings.TrimSpace(cells[5]) == "" {
			t.Errorf("MANIFEST.md gives %s no source or licence", path)
		}
	}
	for _, p := range Files() {
		if !listed[p] {
			t.Errorf("%s is bundled but not in MANIFEST.md", p)
		}
	}
}

// The files are written out at their paths, and a damaged one is written
// again.
func TestWriteOutRepairs(t *testing.T) {
	dir := t.TempDir()
	if err := writeOut(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "math", "aime24", "test.jsonl")
	if err := os.WriteFile(p, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeOut(dir); err != nil {
		t.Fatal(err)
	}
	for _, rel := range Files() {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil || sum(b) != SHA256[rel] {
			t.Errorf("%s: %v, sha256 %s, want %s", rel, err, sum(b), SHA256[rel])
		}
	}
	if _, err := Read("math/none.jsonl"); err == nil || !strings.Contains(err.Error(), "no bundled file") {
		t.Errorf("Read of a file not bundled: %v", err)
	}
}
