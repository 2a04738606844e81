package main

import (
	"crypto/tls"
	"flag"
	"fmt"

	"github.com/aipo-rl/aipo/internal/secure"
	"github.com/aipo-rl/aipo/transforms/collab"
)

// serverAuth holds the flags with which a server command takes its bearer
// token (from an environment variable or a file, never the command line)
// and its TLS certificate.
type serverAuth struct {
	tokenEnv, tokenFile, certFile, keyFile *string
}

// addServerAuth defines --token-env, --token-file, --tls-cert and --tls-key
// on fs; certHelp describes --tls-cert for this server.
func addServerAuth(fs *flag.FlagSet, certHelp string) serverAuth {
	return serverAuth{
		tokenEnv:  fs.String("token-env", "", "environment variable holding the bearer token clients must send"),
		tokenFile: fs.String("token-file", "", "file holding the bearer token clients must send"),
		certFile:  fs.String("tls-cert", "", certHelp),
		keyFile:   fs.String("tls-key", "", "PEM private key of --tls-cert"),
	}
}

// load reads the token, checks that every listen address (flag name ->
// address; empty addresses are skipped) is loopback unless a token is
// required, and loads the TLS configuration (nil without --tls-cert).
func (a serverAuth) load(addrs map[string]string) (token string, tlsCfg *tls.Config, err error) {
	token, err = collab.ReadSecret(*a.tokenEnv, *a.tokenFile)
	if err != nil {
		return "", nil, fmt.Errorf("token: %w", err)
	}
	for flagName, addr := range addrs {
		if addr == "" {
			continue
		}
		if err := secure.CheckBind(flagName, addr, token != ""); err != nil {
			return "", nil, err
		}
	}
	tlsCfg, err = secure.ServerTLS(*a.certFile, *a.keyFile, "--tls-cert", "--tls-key")
	if err != nil {
		return "", nil, err
	}
	return token, tlsCfg, nil
}
