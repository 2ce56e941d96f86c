#!/usr/bin/env bash
# Regenerates the Go stubs in plegdv1/ from cri-proto/plegd/v1/plegd.proto.
#
# The code generators are pinned here (installed into a temporary GOBIN through the
# Go module proxy), so the output depends only on the proto and these versions; CI
# checks the checked-in stubs are current with:
#
#   clients/go/generate.sh && git diff --exit-code clients/go/plegdv1 &&
#     test -z "$(git status --porcelain clients/go/plegdv1)"
#
# Needs: go, and protoc (Debian: apt-get install protobuf-compiler libprotobuf-dev) with
# the well-known types (google/protobuf/timestamp.proto) on its include path. The
# protoc version does not change the generated code; its line in the file header is
# normalized so that CI's protoc need not match the one that generated the stubs.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
module=github.com/plegd/plegd/clients/go

command -v protoc >/dev/null || { echo "generate.sh: protoc not found (Debian: apt-get install protobuf-compiler)" >&2; exit 1; }

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" GOFLAGS=-mod=mod go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$bin" GOFLAGS=-mod=mod go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"

includes=(-I "$root/cri-proto")
# Debian's protoc finds the well-known types in /usr/include; others ship them in
# their own include directory, which protoc searches by itself.
[ -f /usr/include/google/protobuf/timestamp.proto ] && includes+=(-I /usr/include)

# Ask protoc for the well-known types before the old stubs are removed.
printf 'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n' >"$bin/probe.proto"
protoc -I "$bin" "${includes[@]}" --descriptor_set_out=/dev/null "$bin/probe.proto" 2>/dev/null || {
  echo "generate.sh: protoc cannot find google/protobuf/timestamp.proto (Debian: apt-get install libprotobuf-dev)" >&2
  exit 1
}

rm -f "$here"/plegdv1/*.pb.go
protoc "${includes[@]}" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$here" --go_opt=module="$module" \
  --go-grpc_out="$here" --go-grpc_opt=module="$module" \
  "$root/cri-proto/plegd/v1/plegd.proto"

# The header names the protoc that ran; make it independent of the local install.
sed -E -i.orig 's|^// - protoc( +).*$|// - protoc\1(see generate.sh)|; s|^//([[:space:]]+)protoc([[:space:]]+).*$|//\1protoc\2(see generate.sh)|' "$here"/plegdv1/*.pb.go
rm -f "$here"/plegdv1/*.pb.go.orig
