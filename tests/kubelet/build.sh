#!/usr/bin/env bash
# Builds the kubelet from its Go modules and caches the binary, for the tests that run
# plegd beside a real kubelet. Prints the binary's path.
#
# k8s.io/kubernetes pins its k8s.io/* staging modules to ./staging/... with replace
# directives, so `go install …/cmd/kubelet@VERSION` is refused. A module of our own
# requires k8s.io/kubernetes at VERSION and replaces each staging module with the same
# module at its matching v0 release (v1.37.2 → v0.37.2), from the Go module proxy.
#
#   KUBELET_VERSION (default v1.37.2), PLEGD_KUBELET_CACHE (default /var/cache/plegd/kubelet)
set -euo pipefail
version=${KUBELET_VERSION:-v1.37.2}
cache=${PLEGD_KUBELET_CACHE:-/var/cache/plegd/kubelet}
out="$cache/$version/kubelet"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "tests/kubelet/build.sh: needs Go (1.26 builds kubelet 1.37)" >&2; exit 1; }
work="$cache/$version/module"
mkdir -p "$work"
cd "$work"
export GOFLAGS=-mod=mod
[ -f go.mod ] || go mod init plegd.test/kubelet >&2
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
staging="v0.${version#v1.}"
mapfile -t modules < <(grep -oE '^[[:space:]]*k8s\.io/[A-Za-z0-9._-]+[[:space:]]+=>[[:space:]]+\./staging/' "$gomod" | awk '{print $1}' | sort -u)
[ ${#modules[@]} -gt 0 ] || { echo "tests/kubelet/build.sh: no staging replacements in $gomod" >&2; exit 1; }
for m in "${modules[@]}"; do
  go mod edit -replace "$m=$m@$staging"
done
go mod edit -require "k8s.io/kubernetes@$version"
go get "k8s.io/kubernetes/cmd/kubelet@$version" >&2
minor=${version#v1.}
minor=${minor%%.*}
go build -o "$out.tmp" \
  -ldflags "-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  k8s.io/kubernetes/cmd/kubelet >&2
mv "$out.tmp" "$out"
echo "$out"
