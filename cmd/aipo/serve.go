package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/learner/cuda"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/pipelines/serve"
	// The grpc(s):// and http(s):// policy schemes, for every command that
	// opens a policy endpoint.
	_ "github.com/aipo-rl/aipo/transforms/policy/grpcclient"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

func init() {
	register(command{
		name:    "serve",
		summary: "serve a policy checkpoint over gRPC (aipo.v1.Policy) and an OpenAI-compatible HTTP API, with hot reload",
		run:     runServe,
	})
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	ckpt := fs.String("checkpoint", "", "committed checkpoint directory to serve (default: the newest of --watch)")
	watch := fs.String("watch", "", "run directory to watch: its newest committed checkpoint (checkpoints/step-N) is loaded when it appears")
	every := fs.Duration("watch-every", 10*time.Second, "how often to look for a newer checkpoint under --watch")
	grpcAddr := fs.String("grpc", "127.0.0.1:7070", "gRPC address (empty: no gRPC)")
	httpAddr := fs.String("http", "127.0.0.1:8000", "HTTP address of the OpenAI-compatible API (empty: no HTTP)")
	name := fs.String("name", "", "model name of the HTTP API (default: the base name of --watch, else of --checkpoint)")
	tok := fs.String("tokenizer", "", "tokenizer instead of the checkpoint's: builtin or a tokenizer.json path")
	maxBatch := fs.Int("max-batch", 0, "sequences decoded together (0: engine default 64)")
	maxQueue := fs.Int("max-queue", 0, "requests waiting for the batch before new ones get 429 / RESOURCE_EXHAUSTED (0: engine default 1024)")
	maxContext := fs.Int("max-context", 0, "most prompt plus output tokens (0: the model's max_position_embeddings)")
	sessionTokens := fs.Int("session-tokens", 0, "KV-cache positions kept for sessions (0: engine default)")
	auth := addServerAuth(fs, "PEM certificate for TLS on both listeners (with --tls-key)")
	grace := fs.Duration("grace", 30*time.Second, "how long requests in flight may finish on SIGINT/SIGTERM")
	device := fs.String("device", "cpu", "where the engine decodes: cpu, or cuda (GPU 0, learner/cuda)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: aipo serve --checkpoint DIR [--watch RUNDIR] [--grpc 127.0.0.1:7070] [--http 127.0.0.1:8000]\n\n"+
			"Serves a policy checkpoint with the built-in engine: gRPC service aipo.v1.Policy (with\n"+
			"reflection) and OpenAI-compatible /v1/completions, /v1/chat/completions, /v1/models,\n"+
			"/health, /tokenize, /detokenize. Rollouts reach it as grpc://HOST:PORT or\n"+
			"http://HOST:PORT/v1?model=NAME. Reload swaps the weights without failing requests.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "aipo serve: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q (see --help)", fs.Args())
	}
	if *ckpt == "" && *watch == "" {
		return fail("give --checkpoint DIR, --watch RUNDIR or both")
	}
	if *every <= 0 {
		return fail("--watch-every %s must be positive", *every)
	}
	if *device != "cpu" && *device != "cuda" {
		return fail("--device %q is unknown: use cpu or cuda", *device)
	}
	token, tlsCfg, err := auth.load(map[string]string{"--grpc": *grpcAddr, "--http": *httpAddr})
	if err != nil {
		return fail("%v", err)
	}

	var gpu *cuda.Device
	if *device == "cuda" {
		if gpu, err = cuda.Open(0); err != nil {
			fmt.Fprintf(os.Stderr, "aipo serve: --device cuda: %v\n", err)
			return 1
		}
		defer gpu.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := serve.New(ctx, serve.Options{Checkpoint: *ckpt, WatchRun: *watch, Tokenizer: *tok, Name: *name, Token: token,
		Engine: engine.Config{MaxBatch: *maxBatch, MaxQueue: *maxQueue, MaxContext: *maxContext, SessionTokens: *sessionTokens},
		GPU:    gpu})
	if err != nil {
		fmt.Fprintf(os.Stderr, "aipo serve: %v\n", err)
		return 1
	}
	defer srv.Close()
	var gl, hl net.Listener
	if *grpcAddr != "" {
		if gl, err = net.Listen("tcp", *grpcAddr); err != nil {
			fmt.Fprintf(os.Stderr, "aipo serve: --grpc %s: %v\n", *grpcAddr, err)
			return 1
		}
	}
	if *httpAddr != "" {
		if hl, err = net.Listen("tcp", *httpAddr); err != nil {
			fmt.Fprintf(os.Stderr, "aipo serve: --http %s: %v\n", *httpAddr, err)
			return 1
		}
	}
	if *watch != "" {
		go srv.Watch(ctx, *every)
	}
	if err := srv.Serve(ctx, gl, hl, tlsCfg, *grace); err != nil {
		fmt.Fprintf(os.Stderr, "aipo serve: %v\n", err)
		return 1
	}
	return 0
}
