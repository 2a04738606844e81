// Package netcheck lists the TCP sockets this process listens on, so that
// tests can prove every server we start (prism's job server included) is
// bound to loopback.
package netcheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Listener is one listening TCP socket of this process.
type Listener struct {
	Addr string // local address as the kernel reports it, hex (e.g. "0100007F:1F90")
	IPv6 bool
}

// Wildcard reports whether the socket listens on every interface.
func (l Listener) Wildcard() bool {
	host, _, _ := strings.Cut(l.Addr, ":")
	return strings.Trim(host, "0") == ""
}

// Loopback reports whether the socket listens on 127.0.0.0/8 or ::1.
func (l Listener) Loopback() bool {
	host, _, _ := strings.Cut(l.Addr, ":")
	if !l.IPv6 {
		return len(host) == 8 && strings.HasSuffix(host, "7F") // little-endian 127.x.x.x
	}
	return host == "00000000000000000000000001000000" || // ::1
		strings.HasPrefix(host, "0000000000000000FFFF0000") && strings.HasSuffix(host, "7F") // ::ffff:127.x.x.x
}

func (l Listener) String() string {
	v := "tcp4"
	if l.IPv6 {
		v = "tcp6"
	}
	return v + " " + l.Addr
}

// Listening returns the listening TCP sockets owned by this process (Linux).
func Listening() ([]Listener, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("netcheck: %w (Linux /proc is needed)", err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var out []Listener
	for _, f := range []struct {
		path string
		v6   bool
	}{{"/proc/self/net/tcp", false}, {"/proc/self/net/tcp6", true}} {
		file, err := os.Open(f.path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 9)
			if len(fields) < 10 || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			if inodes[fields[9]] {
				out = append(out, Listener{Addr: fields[1], IPv6: f.v6})
			}
		}
		file.Close()
	}
	return out, nil
}
