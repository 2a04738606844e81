package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/serve"

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

// serveUsage heads aipo serve --help, above its flags.
const serveUsage = "Usage: aipo serve --checkpoint DIR [--lora ADAPTER] [--watch RUNDIR] [--grpc 127.0.0.1:7070] [--http 127.0.0.1:8000]\n\n" +
	"Serves a policy checkpoint with the built-in engine: gRPC service aipo.v1.Policy (with\n" +
	"reflection) and OpenAI-compatible /v1/completions, /v1/chat/completions, /v1/models,\n" +
	"/health, /tokenize, /detokenize. Rollouts reach it as grpc://HOST:PORT or\n" +
	"http://HOST:PORT/v1?model=NAME. Reload swaps the weights without failing requests.\n" +
	"Request bodies, slow or idle clients, connections and each client's concurrent\n" +
	"requests are bounded (--max-body-bytes ... --max-client-requests).\n" +
	"With --lora, a PEFT LoRA adapter is served beside the base under its own name\n" +
	"(--lora-name), as vLLM serves --lora-modules: /v1/models lists it with the base as\n" +
	"its parent, requests naming it and every gRPC call sample with it, and a reload of\n" +
	"an adapter directory (Reload, or --watch on a LoRA run) replaces it.\n\nFlags:\n"

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	ckpt := fs.String("checkpoint", "", "committed checkpoint or Hugging Face model directory (config.json, model.safetensors or shards, tokenizer.json) to serve (default: the newest of --watch)")
	lora := fs.String("lora", "", "PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) to serve beside the --checkpoint base, merged into a copy of its weights")
	loraName := fs.String("lora-name", "", "model name of the --lora adapter in the HTTP API (default: the base name of --lora)")
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
	device := fs.String("device", backend.CPUName, "the compute backend the engine decodes on: "+strings.Join(backend.Names(), " or ")+" (cuda: GPU 0)")
	maxBody := fs.Int64("max-body-bytes", 0, "largest HTTP request body and gRPC request message; larger ones get 413 / RESOURCE_EXHAUSTED (0: 32 bytes per token of the context plus 1 MiB)")
	headerTimeout := fs.Duration("header-timeout", serve.DefaultHeaderTimeout, "how long a client may take to send a request's headers (0: no limit)")
	bodyTimeout := fs.Duration("body-timeout", serve.DefaultBodyTimeout, "how long a client may take to send a request's body; slower ones get 408 and are disconnected (0: no limit)")
	idleTimeout := fs.Duration("idle-timeout", serve.DefaultIdleTimeout, "how long a keep-alive HTTP connection may wait for its next request, and a gRPC connection may stay without calls (0: no limit)")
	writeTimeout := fs.Duration("write-timeout", serve.DefaultWriteTimeout, "how long one write of a response may block on a client that does not read; a stream that is read may run longer (0: no limit)")
	maxConns := fs.Int("max-conns", serve.DefaultMaxConns, "open connections per listener; further ones wait to be accepted until one closes (0: no limit)")
	storageTimeout := fs.String("storage-timeout", "", storageTimeoutUsage)
	dtype := fs.String("dtype", serve.DTypeAuto, "precision of the decoder: auto (bfloat16 when the checkpoint stores bfloat16 and, on the cpu device, the model is at least 512 wide and the CPU has AMX or AVX512-BF16; else float32), bfloat16 (weights, each product's inputs and the KV cache in bfloat16; float32 accumulation, attention arithmetic and sampling; on the cpu device batch-invariant at no cost) or float32 (the exact reference)")
	invariant := fs.Bool("batch-invariant", true, "decode every sequence bit for bit alike whatever other requests share its step, so that seeded samples repeat under any load (false: one plain product a step, faster on CPUs whose BLAS kernels compute a row by its position in the batch, such as OpenBLAS's Haswell and Zen kernels; the cpu device in float32 only: bfloat16 is batch-invariant at no cost)")
	maxClient := fs.Int("max-client-requests", serve.DefaultMaxClientRequests, "generation requests in flight from one client IP, HTTP and gRPC together; further ones get 429 with Retry-After / RESOURCE_EXHAUSTED (0: no limit)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, serveUsage)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q (see --help)", fs.Args())
	}
	if err := applyStorageTimeout(*storageTimeout); err != nil {
		return usageError("%v", err)
	}
	if *ckpt == "" && *watch == "" {
		return usageError("give --checkpoint DIR, --watch RUNDIR or both")
	}
	if *every <= 0 {
		return usageError("--watch-every %s must be positive", *every)
	}
	be, err := backend.Lookup(*device)
	if err != nil {
		return usageError("--device: %v", err)
	}
	// ResolveDType checks the value and, for bfloat16, the CPU's
	// instructions, which only the cpu device needs: another device says
	// when it loads whether it holds bfloat16 (cuda does).
	if _, err := serve.ResolveDType(*dtype, "", 0); err != nil && (*device == backend.CPUName || *dtype != serve.DTypeBF16) {
		return usageError("--%v", err)
	}
	if !*invariant && *device != backend.CPUName {
		return usageError("--batch-invariant=false chooses how the cpu device multiplies a step; drop it for --device %s", *device)
	}
	bounds, err := serveBounds(*maxBody, map[string]time.Duration{"--header-timeout": *headerTimeout, "--body-timeout": *bodyTimeout,
		"--idle-timeout": *idleTimeout, "--write-timeout": *writeTimeout}, map[string]int{"--max-conns": *maxConns, "--max-client-requests": *maxClient})
	if err != nil {
		return err
	}
	token, tlsCfg, err := auth.load(map[string]string{"--grpc": *grpcAddr, "--http": *httpAddr})
	if err != nil {
		return usageError("%v", err)
	}
	opts := bounds
	if *loraName != "" && *lora == "" {
		return usageError("--lora-name names the --lora adapter: give --lora DIR too")
	}
	if *lora != "" && *ckpt == "" {
		return usageError("--lora %s needs its base: give --checkpoint BASE", *lora)
	}
	opts.Checkpoint, opts.WatchRun, opts.Tokenizer, opts.Name, opts.Token = *ckpt, *watch, *tok, *name, token
	opts.LoRA, opts.LoRAName = *lora, *loraName
	opts.Engine = engine.Config{MaxBatch: *maxBatch, MaxQueue: *maxQueue, MaxContext: *maxContext, SessionTokens: *sessionTokens}
	opts.BatchVariant = !*invariant
	opts.DType = *dtype
	return serveRun{backend: be, device: *device, opts: opts, grpcAddr: *grpcAddr, httpAddr: *httpAddr, tls: tlsCfg,
		every: *every, grace: *grace}.run()
}

// serveRun is an aipo serve whose flags are checked.
type serveRun struct {
	backend            backend.Backend
	device             string // --device, for errors
	opts               serve.Options
	grpcAddr, httpAddr string
	tls                *tls.Config
	every, grace       time.Duration // --watch-every, --grace
}

// run opens the device, loads the model, listens and serves until SIGINT
// or SIGTERM, then lets requests in flight finish within the grace.
func (r serveRun) run() error {
	dev, err := r.backend.Open()
	if err != nil {
		return runError("--device %s: %v", r.device, err)
	}
	defer dev.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := r.opts
	opts.Device = dev
	srv, err := serve.New(ctx, opts)
	if err != nil {
		return runError("%v", err)
	}
	defer srv.Close()
	gl, hl, err := listen(r.grpcAddr, r.httpAddr)
	if err != nil {
		return err
	}
	if opts.WatchRun != "" {
		go srv.Watch(ctx, r.every)
	}
	if err := srv.Serve(ctx, gl, hl, r.tls, r.grace); err != nil {
		return runError("%v", err)
	}
	return nil
}

// serveBounds turns the limit flags into serve.Options: the flags take 0
// for no limit, Options 0 for its default and a negative value for none.
// A negative flag is a usage error naming it.
func serveBounds(maxBody int64, timeouts map[string]time.Duration, counts map[string]int) (serve.Options, error) {
	if maxBody < 0 {
		return serve.Options{}, usageError("--max-body-bytes %d must be positive, or 0 for the default that follows the context", maxBody)
	}
	o := serve.Options{MaxBodyBytes: maxBody}
	durations := map[string]*time.Duration{"--header-timeout": &o.HeaderTimeout, "--body-timeout": &o.BodyTimeout,
		"--idle-timeout": &o.IdleTimeout, "--write-timeout": &o.WriteTimeout}
	for _, name := range slices.Sorted(maps.Keys(timeouts)) {
		switch v := timeouts[name]; {
		case v < 0:
			return o, usageError("%s %s must not be negative (0: no limit)", name, v)
		case v == 0:
			*durations[name] = -1
		default:
			*durations[name] = v
		}
	}
	ints := map[string]*int{"--max-conns": &o.MaxConns, "--max-client-requests": &o.MaxClientRequests}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		switch v := counts[name]; {
		case v < 0:
			return o, usageError("%s %d must not be negative (0: no limit)", name, v)
		case v == 0:
			*ints[name] = -1
		default:
			*ints[name] = v
		}
	}
	return o, nil
}

// listen opens the gRPC and HTTP listeners (nil for an empty address).
func listen(grpcAddr, httpAddr string) (gl, hl net.Listener, err error) {
	if grpcAddr != "" {
		if gl, err = net.Listen("tcp", grpcAddr); err != nil {
			return nil, nil, runError("--grpc %s: %v", grpcAddr, err)
		}
	}
	if httpAddr != "" {
		if hl, err = net.Listen("tcp", httpAddr); err != nil {
			if gl != nil {
				gl.Close()
			}
			return nil, nil, runError("--http %s: %v", httpAddr, err)
		}
	}
	return gl, hl, nil
}
