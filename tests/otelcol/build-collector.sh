#!/usr/bin/env bash
# Builds the OpenTelemetry Collector with the plegd processor (tests/otelcol/collector:
# filelog receiver → plegd processor → file exporter) that tests/otelcol/run.sh runs.
# Idempotent: rebuilds only when the binary is missing or when the collector's go.mod,
# go.sum, main.go, the processor's or the Go client's sources, or the Go version
# changed (stamp file with a hash beside the binary). Prints the binary's path as its
# last line.
#
#   PLEGD_OTELCOL_BIN  output path (default target/otelcol-plegd-processor/otelcol-plegd-processor,
#                      relative paths are taken from the repo root)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
src="$here/collector"

bin="${PLEGD_OTELCOL_BIN:-target/otelcol-plegd-processor/otelcol-plegd-processor}"
case "$bin" in
  /*) ;;
  *) bin="$root/$bin" ;;
esac
stamp="$bin.stamp"

if ! command -v go >/dev/null 2>&1; then
  echo "build-collector.sh: error: 'go' not found in PATH; Go >= 1.26 is needed to build the test collector ($src)" >&2
  exit 1
fi

hash="$(
  {
    go version
    cat "$src/go.mod" "$src/go.sum" "$src/main.go"
    # The processor and the client it is built on, as the replace directives take them.
    find "$root/clients/otelcol" "$root/clients/go" -name '*.go' -not -name '*_test.go' -print0 |
      sort -z | xargs -0 cat
    cat "$root/clients/otelcol/go.mod" "$root/clients/go/go.mod"
  } | sha256sum | cut -d' ' -f1
)"

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$(dirname "$bin")"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT

echo "build-collector.sh: building $bin (the first build takes several minutes)" >&2
start=$(date +%s)
nice_cmd=()
command -v nice >/dev/null 2>&1 && nice_cmd=(nice -n 10)
if ! (cd "$src" && "${nice_cmd[@]}" go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$tmp" .); then
  echo "build-collector.sh: error: go build of the test collector in $src failed" >&2
  exit 1
fi
mv -f "$tmp" "$bin"
echo "$hash" >"$stamp"
echo "build-collector.sh: built in $(($(date +%s) - start))s" >&2
echo "$bin"
