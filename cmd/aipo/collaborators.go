package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/transforms/collab"
	_ "github.com/aipo-rl/aipo/transforms/collab/kinds"
	"github.com/aipo-rl/aipo/transforms/collab/rpc"
)

func init() {
	register(command{
		name:    "collaborators serve",
		summary: "host the configured Verify/Knowledge/Reasoning agents over gRPC (aipo.v1.Collaborator)",
		run:     runCollaboratorsServe,
	})
	register(command{
		name:    "collaborators ask",
		summary: "ask one configured agent one question and print the answer (for checking a config)",
		run:     runCollaboratorsAsk,
	})
}

func runCollaboratorsServe(args []string) error {
	fs := flag.NewFlagSet("collaborators serve", flag.ContinueOnError)
	config := fs.String("config", "", "collaborators YAML file (see the collab.Config documentation)")
	addr := fs.String("addr", "127.0.0.1:7071", "address to listen on; a non-loopback address needs a token")
	auth := addServerAuth(fs, "PEM certificate to serve TLS with (with --tls-key); clients then use grpcs://HOST:PORT")
	grace := fs.Duration("grace", 10*time.Second, "how long to let calls in flight finish on SIGINT/SIGTERM")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo collaborators serve --config FILE [--addr 127.0.0.1:7071] [--token-env NAME | --token-file FILE] [--tls-cert FILE --tls-key FILE]\n\n"+
			"Hosts the agents of FILE (any kind: builtin-demo, openai, grpc) as the gRPC service\n"+
			"aipo.v1.Collaborator, with the retries, limits, breaker and cache of the config.\n"+
			"Rollouts reach it with kind: grpc and endpoint: HOST:PORT, or with TLS endpoint:\n"+
			"grpcs://HOST:PORT and tls_ca_file: the CA that signed --tls-cert.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *config == "" || fs.NArg() > 0 {
		return usageError("--config FILE is required and no arguments are taken (see --help)")
	}
	token, tlsCfg, err := auth.load(map[string]string{"--addr": *addr})
	if err != nil {
		return usageError("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	set, err := loadSet(ctx, *config)
	if err != nil {
		return runError("%v", err)
	}
	defer set.Close()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return runError("listening on %s: %v", *addr, err)
	}
	access := "no token"
	if token != "" {
		access = "bearer token required"
	}
	transport := "plain text"
	if tlsCfg != nil {
		transport = "TLS"
	}
	fmt.Printf("serving agents %v on %s (%s, %s)\n", set.Agents(), lis.Addr(), transport, access)
	if err := rpc.ServeTLS(ctx, lis, set, token, tlsCfg, *grace); err != nil {
		return runError("%v", err)
	}
	st, _ := json.Marshal(collab.Metrics(set.Stats()))
	fmt.Printf("stopped; counters: %s\n", st)
	return nil
}

func loadSet(ctx context.Context, path string) (collab.Set, error) {
	cfg, err := collab.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	return collab.NewSet(ctx, cfg, collab.Env{})
}

func runCollaboratorsAsk(args []string) error {
	fs := flag.NewFlagSet("collaborators ask", flag.ContinueOnError)
	config := fs.String("config", "", "collaborators YAML file")
	agent := fs.String("agent", "", "verify, knowledge or reason")
	step := fs.Int64("step", 0, "training step (drives the noise curriculum)")
	seed := fs.Uint64("seed", 0, "call seed (the noise decision and choices derive from it)")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall time limit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo collaborators ask --config FILE --agent NAME [--step N] [--seed S] QUERY\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := collab.ParseAgent(*agent)
	if err != nil || *config == "" || fs.NArg() != 1 {
		return usageError("need --config FILE, --agent verify|knowledge|reason and one QUERY argument (see --help)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	set, err := loadSet(ctx, *config)
	if err != nil {
		return runError("%v", err)
	}
	defer set.Close()
	ans, err := set.Answer(ctx, collab.Query{Agent: a, Text: fs.Arg(0), Run: "ask", Step: *step, Seed: *seed})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within --timeout %v", *timeout)
		}
		return runError("%v", err)
	}
	out, _ := json.Marshal(map[string]any{"text": ans.Text, "noisy": ans.Noisy, "status": ans.Status, "latency_ms": ans.Latency.Milliseconds()})
	fmt.Println(string(out))
	return nil
}
