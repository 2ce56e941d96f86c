#!/usr/bin/env bash
# Builds the OpenTelemetry Collector with the plegd processor (tests/otelcol/collector:
# filelog receiver → plegd processor → file exporter) that tests/otelcol/run.sh runs, the
# way tests/otlp/build-collector.sh builds its own: rebuilt only when the collector's
# go.mod, go.sum, main.go, the processor's or the Go client's sources, or the Go version
# changed. Prints the binary's path as its last line.
#
#   PLEGD_OTELCOL_BIN  output path (default target/otelcol-plegd-processor/otelcol-plegd-processor,
#                      relative paths are taken from the repo root)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# The processor and the client it is built on, as the replace directives take them.
depends="$(
  find "$root/clients/otelcol" "$root/clients/go" \( -name '*.go' -not -name '*_test.go' -o -name go.mod \) -print0 |
    sort -z | tr '\0' '\n'
)"
PLEGD_COLLECTOR_SRC="$here/collector" \
  PLEGD_COLLECTOR_DEPENDS="$depends" \
  PLEGD_OTLP_COLLECTOR_BIN="${PLEGD_OTELCOL_BIN:-target/otelcol-plegd-processor/otelcol-plegd-processor}" \
  exec bash "$root/tests/otlp/build-collector.sh"
