// Command prism runs a standalone prism job server on 127.0.0.1 (the copy
// of Beam's prism in internal/third_party/beam), for pipelines submitted
// with --runner=universal --endpoint=127.0.0.1:PORT: the portable-runner
// tests' job server, speaking the job API of Beam's Flink job server. Its
// flags are those of Beam's cmd/prism that aipo uses; it has no web UI.
//
//	go run ./internal/beamrun/cmd/prism --job_port=8073 --log_level=warn
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aipo-rl/aipo/internal/third_party/beam/prism"
)

func main() {
	port := flag.Int("job_port", 8073, "the port of 127.0.0.1 the job server listens on (0: one the kernel picks)")
	serveHTTP := flag.Bool("serve_http", false, "Beam's web UI flag: only false is accepted (this prism has no web UI)")
	level := flag.String("log_level", "info", "the job server's log level: debug, info, warn or error")
	flag.Parse()
	if *serveHTTP {
		fail("--serve_http=true: this prism has no web UI; drop the flag or pass --serve_http=false")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fail(fmt.Sprintf("--log_level=%q: want debug, info, warn or error", *level))
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})))
	s, err := prism.Start(*port)
	if err != nil {
		fail(fmt.Sprintf("%v (is --job_port=%d taken?)", err, *port))
	}
	slog.Info("prism job server listening", "endpoint", s.Endpoint())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	// Running jobs hold streams open; give them a few seconds to end.
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "prism:", msg)
	os.Exit(2)
}
