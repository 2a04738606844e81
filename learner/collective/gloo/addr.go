package gloo

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
)

// Environment variables that choose where the TCP device binds.
const (
	IfnameEnv = "GLOO_SOCKET_IFNAME" // an interface name, as PyTorch reads it
	AddrEnv   = "AIPO_GLOO_ADDR"     // an IP address or host name of this machine
)

// bindTarget returns the host name (or interface) for the device: the
// interface in GLOO_SOCKET_IFNAME, the address in AIPO_GLOO_ADDR, or the
// local address of a route to MASTER_ADDR (a UDP "connection" sends
// nothing; it only asks the kernel which source address it would use);
// why says which of the three it is, for the rank's log.
func bindTarget(env collective.Env) (hostname, iface, why string, err error) {
	if v := os.Getenv(IfnameEnv); v != "" {
		if _, err := net.InterfaceByName(v); err != nil {
			return "", "", "", fmt.Errorf("collective: %s=%q: %w; set it to an interface of this machine (ip -brief addr lists them) or unset it", IfnameEnv, v, err)
		}
		return "", v, fmt.Sprintf("interface %s from %s", v, IfnameEnv), nil
	}
	if v := os.Getenv(AddrEnv); v != "" {
		return v, "", fmt.Sprintf("%s=%s", AddrEnv, v), nil
	}
	c, err := net.DialTimeout("udp", env.StoreAddr(), 5*time.Second)
	if err != nil {
		return "", "", "", fmt.Errorf("collective: no route from this machine to MASTER_ADDR %s: %w; set %s or %s to the address the other ranks can reach", env.MasterAddr, err, AddrEnv, IfnameEnv)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), "", fmt.Sprintf("the route to MASTER_ADDR %s; %s or %s choose another", env.MasterAddr, IfnameEnv, AddrEnv), nil
}
