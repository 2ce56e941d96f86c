#!/usr/bin/env bash
# What OTLP export costs plegd: the same churn on the simulated runtime, plegd without
# and then with --otlp-endpoint (a real collector, tests/otlp/build-collector.sh), back
# to back. Prints, per run: events published per second, records exported per second,
# plegd's CPU (percent of one core) and its resident memory at the end.
#
#   bash scripts/otlp-cost.sh [churn per second=50] [seconds=60]
#
# --churn-per-sec 50 on 200 pods makes about 115 events/s (a busy node); 500 about ten
# times that.
set -euo pipefail
churn=${1:-50}
secs=${2:-60}
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/plegd
collector=$(bash tests/otlp/build-collector.sh | tail -1)
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks=$(getconf CLK_TCK)
cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$1/stat"; }

run() {
  local label=$1; shift
  rm -rf "$dir/state" "$dir"/*.sock
  local port; port=$(free_port)
  $bin sim --listen "unix://$dir/cri.sock" --pods 200 --churn-per-sec "$churn" >/dev/null 2>&1 &
  local sim=$!
  while [ ! -S "$dir/cri.sock" ]; do sleep 0.1; done
  $bin run --runtime-endpoint "unix://$dir/cri.sock" --listen "unix://$dir/plegd.sock" \
    --admin-addr "127.0.0.1:$port" --debug-addr 127.0.0.1:0 --state-dir "$dir/state" "$@" >"$dir/plegd.log" 2>&1 &
  local pid=$!
  until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do sleep 0.1; done
  sleep 5
  local m0 c0 e0; m0=$(curl -s "127.0.0.1:$port/metrics")
  c0=$(cpu "$pid")
  e0=$(awk '$1 == "plegd_otlp_exported_records_total" {print $2}' <<<"$m0"); e0=${e0:-0}
  local r0; r0=$(awk '$1 == "plegd_journal_revision" {print $2}' <<<"$m0")
  sleep "$secs"
  local m1 c1; m1=$(curl -s "127.0.0.1:$port/metrics"); c1=$(cpu "$pid")
  local r1 e1 lag rss
  r1=$(awk '$1 == "plegd_journal_revision" {print $2}' <<<"$m1")
  e1=$(awk '$1 == "plegd_otlp_exported_records_total" {print $2}' <<<"$m1"); e1=${e1:-0}
  lag=$(awk '$1 == "plegd_otlp_lag_revisions" {print $2}' <<<"$m1"); lag=${lag:--}
  rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
  awk -v l="$label" -v s="$secs" -v r0="$r0" -v r1="$r1" -v e0="$e0" -v e1="$e1" -v c0="$c0" -v c1="$c1" -v rss="$rss" -v lag="$lag" \
    'BEGIN {printf "%-14s %8.1f events/s %8.1f exported/s  cpu %5.1f%%  rss %6.1f MiB  lag %s\n", l, (r1-r0)/s, (e1-e0)/s, 100*(c1-c0)/s, rss, lag}'
  kill "$pid" "$sim"; wait "$pid" "$sim" 2>/dev/null || true
}

cport=$(free_port)
PLEGD_OTLP_COLLECTOR_ENDPOINT=127.0.0.1:$cport PLEGD_OTLP_COLLECTOR_OUT=$dir/out.jsonl \
  "$collector" --config=tests/otlp/collector.yaml.tmpl >"$dir/collector.log" 2>&1 &
echo "# churn $churn/s on 200 pods, $secs s per run, release binary; $(nproc) cores"
run "no export"
run "OTLP export" --otlp-endpoint "http://127.0.0.1:$cport" --node-name bench
