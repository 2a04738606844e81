package testgate

import (
	"bufio"
	"os"
	"strings"
)

// ModulePath returns the module path declared in the go.mod at path, or ""
// when the file is absent or declares none.
func ModulePath(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}
