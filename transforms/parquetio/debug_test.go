package parquetio

import (
	"os"
	"strings"
	"testing"
)

// TestDebugListeners prints the TCP sockets in LISTEN state (run after the
// other tests, prism's job server is up).
func TestDebugListeners(t *testing.T) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if len(fs) > 3 && fs[3] == "0A" {
				t.Logf("%s LISTEN %s", f, fs[1])
			}
		}
	}
}
