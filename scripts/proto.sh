#!/usr/bin/env bash
# Regenerates the Go code of every .proto file under schemas/proto.
#
# Each file's go_package option decides where its code goes (paths are taken
# relative to the module root, so "github.com/aipo-rl/aipo/schemas/aipov1"
# lands in schemas/aipov1/). The generated files are committed; run this
# after editing a .proto file and commit the result.
#
# Needs protoc (Debian: apt-get install -y protobuf-compiler) and the Go
# plugins below; missing plugins are installed with `go install`.
set -euo pipefail

cd "$(dirname "$0")/.."
MODULE=$(go list -m)
PROTOC_GEN_GO_VERSION=${PROTOC_GEN_GO_VERSION:-v1.36.12}
PROTOC_GEN_GO_GRPC_VERSION=${PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}
GOBIN=$(go env GOBIN)
[ -n "$GOBIN" ] || GOBIN="$(go env GOPATH)/bin"
export PATH="$GOBIN:$PATH"

if ! command -v protoc >/dev/null 2>&1; then
	echo "proto.sh: protoc not found; install it (Debian: apt-get install -y protobuf-compiler)" >&2
	exit 1
fi
if ! protoc-gen-go --version 2>/dev/null | grep -q "${PROTOC_GEN_GO_VERSION}"; then
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
fi
if ! protoc-gen-go-grpc --version 2>/dev/null | grep -q "${PROTOC_GEN_GO_GRPC_VERSION#v}"; then
	go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
fi

mapfile -t files < <(find schemas/proto -name '*.proto' | sort)
if [ "${#files[@]}" -eq 0 ]; then
	echo "proto.sh: no .proto files under schemas/proto" >&2
	exit 1
fi
protoc -I schemas/proto \
	--go_out=. --go_opt="module=${MODULE}" \
	--go-grpc_out=. --go-grpc_opt="module=${MODULE}" \
	"${files[@]}"
echo "proto.sh: generated Go code for ${#files[@]} file(s): ${files[*]}"
