// Package shareddata finds the offline data folder (benchmark files,
// tokenizers, the stories260K model) that sits beside a checkout as
// ../shared/data, for tests and for commands' defaults.
//
// AIPO_SHARED_DATA overrides the search.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the shared data folder, or "" when none is found. It looks at
// $AIPO_SHARED_DATA, then for shared/data beside every directory from the
// working directory upwards.
func Dir() string {
	if d := os.Getenv("AIPO_SHARED_DATA"); d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		c := filepath.Join(dir, "shared", "data")
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// Path returns the path of rel inside the shared data folder, skipping the
// test with the reason when the folder or the file is absent.
func Path(t testing.TB, rel string) string {
	t.Helper()
	d := Dir()
	if d == "" {
		t.Skip("shared data folder not found (want ../shared/data beside the checkout, or set AIPO_SHARED_DATA)")
	}
	p := filepath.Join(d, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared data file %s is absent: %v", rel, err)
	}
	return p
}
