# aipo: AIPO reinforcement learning for reasoning, on Apache Beam and Go.
#
#   make demo   run the main job on the embedded default (sets itself up)
#   make test   run every test (sets itself up)
#   make bench  run the benchmarks and print their ratios
#   make build  build bin/aipo
#   make lint   go vet + staticcheck

GO        ?= go
BIN       := bin/aipo
STATICCHECK_VERSION := v0.8.2
GOBIN     := $(shell $(GO) env GOPATH)/bin
# Tests may take long on 2 cores; keep a generous per-package timeout.
TESTFLAGS ?= -timeout 30m

.PHONY: all build test bench demo lint setup setup-test vet staticcheck clean

all: build

# setup installs the system packages the build uses (OpenBLAS for the fast
# CPU matrix multiply). It is idempotent and skips what is present.
setup:
	@scripts/setup.sh build

# setup-test adds what the tests need on top (DuckDB for interop tests).
setup-test: setup
	@scripts/setup.sh test

build: setup
	$(GO) build -o $(BIN) ./cmd/aipo

vet:
	$(GO) vet ./...

staticcheck:
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

lint: vet staticcheck

test: setup-test
	$(GO) vet ./...
	$(GO) test $(TESTFLAGS) ./...

bench: setup-test
	$(GO) test -run '^$$' -bench . -benchtime 1x ./... 2>&1 | tee bench.out | scripts/bench-summary.sh

demo: build
	$(BIN) demo

clean:
	rm -rf bin bench.out
