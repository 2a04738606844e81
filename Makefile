# aipo: AIPO reinforcement learning for reasoning, on Apache Beam and Go.
#
#   make demo   run the main job on the embedded default (sets itself up)
#   make check  the fast tier: go vet and the hermetic tests, -short (what a
#               plain go test compiles: Go and committed fixtures only)
#   make test   run every test, every peer's included (sets itself up; CI)
#   make test-TAG  one peer's tests (installs that peer alone): TAG is one
#               of PEER_TAGS, e.g. make test-tensorboard, make test-vllm
#   make rehearse  the CPU rehearsal of the paper's recipe, longer than make test's
#   make bench  run the benchmarks and print their ratios
#   make race-prism  prism with several jobs at once, under the race detector (make test runs it)
#   make fresh-clone  a clone of HEAD builds with go build ./... alone, and go install
#               of cmd/aipo@VERSION works from a local module proxy (make test runs it)
#   make bench-smoke  run every benchmark once at its smallest size (make test runs it)
#   make bench-memory  measure a learner step's host memory, before and after, into docs/results/memory.md
#   make build  build bin/aipo
#   make worker cross-compile bin/aipo-worker (Linux amd64, no cgo) for Dataflow and Flink
#   make lint   go vet + staticcheck
#   make ptx    recompile the CUDA kernels to the committed PTX

GO        ?= go
BIN       := bin/aipo
STATICCHECK_VERSION := v0.8.2
GOBIN     := $(shell $(GO) env GOPATH)/bin
# Tests may take long on 2 cores; keep a generous per-package timeout.
# cmd/aipo, the longest package (real vLLM servers and multi-process
# trainings), took 25 min on one 2-core machine and 44.6 min on a slower
# one (2026-12-05): 60 minutes keeps a slow machine from failing on the
# bound alone, inside CI's 90.
TESTFLAGS ?= -timeout 60m

# The two tiers of tests. A peer test runs or needs something outside Go
# and the committed files: a Python environment (vLLM, PyTorch and
# transformers, veRL, TensorBoard, TRL), Java (Flink, Beam's Flink and
# Spark job servers), llama.cpp, Node.js (DuckDB, the OpenAI SDK), grpcurl,
# root's network namespaces, the PROCESS-environment binaries, or a file of
# ../shared/data that is not committed. Each sits in a test file behind
# the build tag of its peer (PEER_TAGS; what each needs: package
# internal/peertags), so that a plain `go test ./...` compiles only the
# hermetic tests, and internal/peertags's test fails a peer test left
# untagged.
#   make check     the fast tier: go vet and the hermetic tests with
#                  CHECKFLAGS (-short: the tests that run the quick demo
#                  or aipo commands many times, kill and restart runs,
#                  train on several ranks, or emulate the CUDA kernels
#                  skip, as each says). No peer and no network once the
#                  build's C libraries are in (make setup). On 2 idle
#                  cores: about 7 minutes from a fresh clone, 2 with a warm
#                  build cache, seconds when nothing changed.
#   make test      the whole (CI's, .ci/run): installs every peer, vets and
#                  tests with all of PEER_TAGS through the skip gate
#                  (internal/testgate), never -short, then race-prism and
#                  bench-smoke.
#   make test-TAG  one peer: scripts/setup.sh peer TAG installs what it
#                  needs, scripts/test-peer.sh runs its tests (listed by
#                  internal/peertags/cmd/peertests) through the gate and
#                  its benchmarks once; test-trl runs BenchmarkGRPOVsTRL
#                  whole, the only run of TRL's side.
PEER_TAGS := vllm torch verl tensorboard trl flink portable llamacpp duckdb openaisdk grpcurl netns shareddata
comma     := ,
empty     :=
space     := $(empty) $(empty)
ALL_TAGS  := $(subst $(space),$(comma),$(strip $(PEER_TAGS)))
CHECKFLAGS ?= -short -timeout 30m
PEER_TESTS := $(addprefix test-,$(filter-out trl,$(PEER_TAGS)))

.PHONY: check test-trl $(PEER_TESTS) race-prism fresh-clone setup-bench bench-memory bench-smoke all build worker beam-boot check-dataflow check-portable test rehearse bench demo lint setup setup-test vet staticcheck clean proto soak reproduce ptx gpu-test-binary

all: build

# setup installs the system packages the build uses (OpenBLAS for the fast
# CPU matrix multiply). It is idempotent and skips what is present.
setup:
	@scripts/setup.sh build

# setup-test adds what the tests need on top (DuckDB for interop tests).
setup-test: setup
	@scripts/setup.sh test

# BUILDVCS stamps the commit into bin/aipo (aipo version) when the tree is a
# git checkout, and is off elsewhere (a source archive has no .git).
BUILDVCS := $(shell git rev-parse --git-dir >/dev/null 2>&1 && echo -buildvcs=true)

build: setup
	$(GO) build $(BUILDVCS) -o $(BIN) ./cmd/aipo

# worker cross-compiles the binary that Dataflow and Flink start as the
# pipelines' SDK worker (pass it with --worker_binary=bin/aipo-worker). It is
# aipo itself, built for Linux amd64 without cgo: the learner's pure-Go
# matrix multiply is linked instead of OpenBLAS, so workers need no shared
# libraries. The build fails if anything needs cgo. Symbol tables and DWARF
# are left out (-s -w): every job uploads the binary to its staging
# location, and stack traces keep their function names and lines.
WORKER    := bin/aipo-worker
worker:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o $(WORKER) ./cmd/aipo

# beam-boot builds the Beam Go SDK's boot program (the entrypoint of the
# apache/beam_go_sdk container) for Linux amd64: the command of a Flink
# PROCESS environment, and with --worker_pool the worker pool of an EXTERNAL
# one (see scripts/flink/README.md).
BEAM_BOOT := bin/beam-boot
beam-boot:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o $(BEAM_BOOT) github.com/apache/beam/sdks/v2/go/container

# check-dataflow translates the analyze, rollout and eval pipelines into
# Dataflow jobs with --dry_run, offline (see scripts/dataflow/README.md).
check-dataflow:
	$(GO) test $(TESTFLAGS) -run 'Dataflow' -v ./cmd/aipo

# check-portable runs aipo analyze through a local portable job server
# (prism, which speaks the job API of Beam's Flink job server) in a PROCESS
# environment: the boot program starts bin/aipo-worker as the SDK worker
# (see scripts/flink/README.md).
check-portable: worker beam-boot
	$(GO) build -o build/tools/prism ./internal/beamrun/cmd/prism
	$(GO) test $(TESTFLAGS) -tags portable -run 'PortableProcessEnvironment' -v ./cmd/aipo

# vet vets both builds: the hermetic one and the one with every peer tag.
vet:
	$(GO) vet ./...
	$(GO) vet -tags $(ALL_TAGS) ./...

staticcheck:
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

lint: vet staticcheck

# worker and beam-boot: the Flink and Spark tests' PROCESS workers. The
# tests run through testgate (internal/testgate), which prints what plain go
# test prints, then every skipped test, and fails the run when a test skips
# without a line of scripts/allowed-skips.txt allowing it (a missing peer or
# data file, -short in TESTFLAGS), besides when go test fails. With -whole
# it also refuses a TESTFLAGS that leaves tests out without a skip (-run,
# -skip, -list, -short): make test is the whole suite.
TESTGATE  := build/tools/testgate
test: setup-test worker beam-boot
	$(GO) vet ./...
	$(GO) vet -tags $(ALL_TAGS) ./...
	@scripts/ptx.sh --check; rc=$$?; \
	if [ $$rc -eq 3 ] && [ "$${AIPO_SKIP_PTX_CHECK:-}" = 1 ]; then echo "make test: AIPO_SKIP_PTX_CHECK=1: the PTX staleness check is skipped (see the line above)"; \
	elif [ $$rc -eq 3 ]; then echo "make test: the PTX staleness check cannot run (see the line above): install NVRTC 11.8 (scripts/ptx.sh --install, which make setup-test runs), or set AIPO_SKIP_PTX_CHECK=1 to skip it knowingly" >&2; exit 1; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi
	@$(GO) build -o $(TESTGATE) ./internal/testgate/cmd/testgate
	$(TESTGATE) -whole -allow scripts/allowed-skips.txt -- $(GO) test $(TESTFLAGS) -tags $(ALL_TAGS) -json ./...
	@$(MAKE) --no-print-directory race-prism
	@$(MAKE) --no-print-directory bench-smoke

# check is the fast tier (see the top): no peer, and no setup beyond the
# build's C libraries (make setup: OpenBLAS, zstd and Gloo from Debian,
# skipped when present); the PTX staleness check needs NVRTC and stays in
# make test.
check: setup
	$(GO) vet ./...
	$(GO) test $(CHECKFLAGS) ./...

# test-TAG for each tag of PEER_TAGS but trl: that peer's tests (see the
# top). Flink's and the portable runner's PROCESS workers are
# bin/aipo-worker and bin/beam-boot.
$(PEER_TESTS): test-%: setup
	@scripts/setup.sh peer $*
	@GO=$(GO) TESTFLAGS="$(TESTFLAGS)" scripts/test-peer.sh $*
test-flink test-portable: worker beam-boot

# test-trl is BenchmarkGRPOVsTRL at its full size (about 50 minutes on 2
# cores: three rows, three alternated processes a side each), TRL's side and the loss check included: make test's bench-smoke runs aipo's side
# alone, TRL's environment being make setup-bench's.
test-trl: setup
	@scripts/setup.sh peer trl
	@mkdir -p build
	@$(GO) test -tags trl -count=1 -timeout 90m -run '^$$' -bench '^BenchmarkGRPOVsTRL$$' -benchtime 1x -v ./cmd/aipo >build/test-trl.out 2>&1; \
	rc=$$?; scripts/bench-summary.sh <build/test-trl.out; echo "test-trl: the whole output is in build/test-trl.out"; exit $$rc

# race-prism runs pipelines submitted together in one process, and jobs
# staging their artifacts at once on prism's job server, under the race
# detector, which sees an unguarded access to prism's shared state whether or
# not two of them happen to collide (without it, a collision is rare and kills
# the process: see internal/third_party/beam/README.md). About 4 minutes, most
# of it the instrumented build of the Beam SDK.
race-prism:
	@echo "race-prism: building the analytics pipeline with the race detector (a few minutes on 2 cores)"
	$(GO) test -race -count=1 -run '^(TestPipelinesAtOnceInOneProcess|TestArtifactsStagedAtOnce)$$' ./pipelines/analytics/ ./internal/third_party/beam/prism/internal/jobservices/

# fresh-clone clones HEAD into a temporary directory, builds it with a plain
# go build ./... (no make), and installs cmd/aipo with go install
# MODULE@VERSION from a module proxy on disk serving that tree; the binary
# must print its version (scripts/fresh-clone.sh; 6 to 10 minutes on 2
# cores, nothing downloaded). scripts/fresh-clone.sh --test also runs go test
# -short ./... in the clone. make test leaves it out: it builds the whole
# module again in the clone's directory, minutes that CI's bound cannot
# spare.
fresh-clone:
	@scripts/fresh-clone.sh

# bench-smoke runs every benchmark once at its smallest size (-short picks
# it, -benchtime 1x one iteration; each benchmark's doc comment says what it
# shrinks to) and judges no figure, so that a change that breaks a
# benchmark fails make test rather than the next make bench. It goes
# through the skip gate as the tests do: a benchmark that skips fails it
# unless scripts/allowed-skips.txt allows the skip (BenchmarkGRPOVsTRL runs
# aipo's side and skips TRL's, which only make setup-bench installs).
bench-smoke:
	@GO=$(GO) TAGS=$(ALL_TAGS) scripts/bench-smoke.sh

# ptx recompiles learner/cuda/kernels/*.cu to the committed PTX (needs
# NVRTC: scripts/ptx.sh --install sets it up on Debian).
ptx:
	scripts/ptx.sh

# gpu-test-binary builds what scripts/gpu-check.sh runs on a GPU machine
# (which needs no Go): the CUDA tests, the NCCL backend's tests and the
# aipo binary, without cgo (they link no OpenBLAS and no Gloo, and need no
# particular glibc), and the quick demo's warm start for aipo train there.
# build/gpu/carry holds the same xz-compressed (about a third of the size)
# with the warm start: what to copy to a machine that takes a limited
# upload.
gpu-test-binary: build
	CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o build/gpu/cuda.test ./learner/cuda
	CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o build/gpu/nccl.test ./learner/collective/nccl
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o build/gpu/aipo ./cmd/aipo
	rm -rf build/gpu/warm build/gpu/demo build/gpu/carry
	$(BIN) demo --quick --no-tensorboard --run build/gpu/demo >build/gpu/demo.log 2>&1 || { tail -20 build/gpu/demo.log; exit 1; }
	cp -r build/gpu/demo/checkpoints/step-000000 build/gpu/warm && rm -rf build/gpu/demo
	mkdir -p build/gpu/carry && cp -r build/gpu/warm build/gpu/carry/warm
	@echo "compressing the three binaries for build/gpu/carry (xz, a few minutes)"
	for b in cuda.test nccl.test aipo; do xz -T0 -9 -c build/gpu/$$b >build/gpu/carry/$$b.xz; done
	@du -sh build/gpu/carry

# rehearse runs the CPU rehearsal of the paper's recipe (cmd/aipo's
# TestRehearsal, which make test runs at 3 steps) at 20 steps of 8 groups
# with a 100-problem MATH500 slice every 5 steps, printing each command's
# console and the figures it checks.
rehearse: setup-test
	AIPO_REHEARSE=long $(GO) test -tags shareddata -count=1 -timeout 60m -run '^TestRehearsal$$' -v ./cmd/aipo

# setup-bench adds what only the benchmarks need: TRL's environment
# (scripts/trl.sh), for cmd/aipo's BenchmarkGRPOVsTRL, which trains with
# aipo and with TRL's GRPOTrainer side by side and checks that both give one
# batch the same GRPO loss. make test does not install it or run that check.
setup-bench: setup-test
	@scripts/trl.sh

# bench's timeout is per package: cmd/aipo's BenchmarkServeVsVLLM serves a
# tiny and a Qwen3-0.6B-shaped model with aipo serve and with vLLM, three
# alternated rounds of two pairs, one server at a time (77 minutes on 2
# cores on 2026-12-07, most of it vLLM's: its bfloat16 server compiles for
# 5 minutes at each start), and
# BenchmarkGRPOVsTRL trains with aipo and TRL (about 50 minutes, most of it
# TRL's).
bench: setup-bench
	$(GO) test -tags $(ALL_TAGS) -timeout 180m -run '^$$' -bench . -benchtime 1x ./... 2>&1 | tee bench.out | scripts/bench-summary.sh
	@echo "training step with the pure-Go matrix multiply (-tags purego; the 25M model takes minutes and is left out):"
	$(GO) test -tags purego -run '^$$' -bench 'TrainStep/1M' -benchtime 1x ./learner/model 2>&1 | tee -a bench.out | scripts/bench-summary.sh

# bench-memory runs `aipo learn` of the tree before the memory work and of
# this one on 25M, 100M and 300M-parameter models, side by side, and writes
# docs/results/memory.md (peak RSS: host bytes per parameter, activation
# bytes per token per layer; checkpointing's time; the planner's figure).
bench-memory:
	scripts/memory-bench.sh

demo: build
	$(BIN) demo

# reproduce trains every method of the comparison (GRPO, Expert Iteration,
# AIPO-Mask, w/o IS, w/o CS, AIPO, AIPO with a call cost), 3 seeds each, from
# one warm start and writes runs/compare/report/compare.md (hours on 2 cores;
# started again, it continues where it stopped).
reproduce: build
	$(BIN) demo --compare

# soak runs rollout steps for 10 minutes against a policy server and
# collaborators that fail half of their requests, and writes
# build/soak-report.md (failures injected and counted, peak RSS per minute).
soak: setup-test
	AIPO_SOAK_DURATION=10m AIPO_SOAK_REPORT=$(CURDIR)/build/soak-report.md \
		$(GO) test -timeout 30m -count=1 -run '^TestFaultSoak$$' -v ./train/

# proto regenerates the Go code of every schemas/proto/**/*.proto (needs
# protoc: apt-get install -y protobuf-compiler; the Go plugins install
# themselves at pinned versions).
proto:
	scripts/proto.sh

clean:
	rm -rf bin build bench.out
