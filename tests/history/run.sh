#!/usr/bin/env bash
# The cluster-history recipe (docs/cluster-history.md): the gateway config validated by a
# collector that has its components, and the queries run by check.py in an embedded
# ClickHouse against records plegd exported (tests/otlp/run.sh keeps them with
# PLEGD_OTLP_RECORDS=DIR). chdb comes from PyPI into a venv cached under /var/cache/plegd.
#   bash tests/history/run.sh RECORDS_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
records=${1:?usage: tests/history/run.sh RECORDS_DIR (the OTLP records tests/otlp/run.sh kept)}
ls "$records"/*.jsonl >/dev/null 2>&1 || { echo "*** no OTLP records (*.jsonl) in $records ***" >&2; exit 1; }
venv=${PLEGD_CHDB_VENV:-/var/cache/plegd/chdb-venv}
if ! "$venv/bin/python" -c 'import chdb' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q chdb==4.4.0
fi
collector=$(bash tests/otlp/build-collector.sh | tail -1)
echo "== otelcol validate docs/history/gateway.yaml"
CLICKHOUSE_ENDPOINT='tcp://127.0.0.1:9000?dial_timeout=10s' CLICKHOUSE_PASSWORD=unused \
  "$collector" validate --config=docs/history/gateway.yaml
echo "PASS the gateway config validates in a collector with the otlp receiver, batch and clickhouse"
exporter=$(cd tests/otlp/collector && go list -m -f '{{.Dir}}' github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter)
"$venv/bin/python" tests/history/check.py "$records" "$exporter" docs/history/queries
