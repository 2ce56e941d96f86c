#!/usr/bin/env bash
# Builds the minimal OpenTelemetry Collector (tests/otlp/collector) that the
# OTLP export tests run. Idempotent: rebuilds only when the binary is missing
# or when go.mod, go.sum, main.go or the Go version changed (stamp file with a
# hash beside the binary). Prints the binary's path as its last line.
#
#   PLEGD_OTLP_COLLECTOR_BIN  output path (default target/otelcol-plegd/otelcol-plegd,
#                             relative paths are taken from the repo root)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# PLEGD_COLLECTOR_SRC builds another Go module the same way (tests/otelcol's collector,
# tests/e2e/nri-reference), and
# PLEGD_COLLECTOR_DEPENDS names more files whose change must rebuild it (one a line).
src="${PLEGD_COLLECTOR_SRC:-$here/collector}"

bin="${PLEGD_OTLP_COLLECTOR_BIN:-target/otelcol-plegd/otelcol-plegd}"
case "$bin" in
  /*) ;;
  *) bin="$root/$bin" ;;
esac
stamp="$bin.stamp"

if ! command -v go >/dev/null 2>&1; then
  echo "build-collector.sh: error: 'go' not found in PATH; Go >= 1.26 is needed to build $src" >&2
  exit 1
fi

hash="$(
  {
    go version
    cat "$src/go.mod" "$src/go.sum" "$src/main.go"
    if [[ -n "${PLEGD_COLLECTOR_DEPENDS:-}" ]]; then
      while IFS= read -r f; do cat "$f"; done <<<"$PLEGD_COLLECTOR_DEPENDS"
    fi
  } | sha256sum | cut -d' ' -f1
)"

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$(dirname "$bin")"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT

echo "build-collector.sh: building $bin (first build takes a few minutes)" >&2
start=$(date +%s)
nice_cmd=()
command -v nice >/dev/null 2>&1 && nice_cmd=(nice -n 10)
if ! (cd "$src" && "${nice_cmd[@]}" go build -buildvcs=false -trimpath -ldflags='-s -w' -o "$tmp" .); then
  echo "build-collector.sh: error: go build of $src failed" >&2
  exit 1
fi
mv -f "$tmp" "$bin"
echo "$hash" >"$stamp"
echo "build-collector.sh: built in $(($(date +%s) - start))s" >&2
echo "$bin"
