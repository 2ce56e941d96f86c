#!/usr/bin/env bash
# How long a restart of plegd takes with a full journal: from `plegd run` to `/readyz`
# 200 (the journal opened and checked, its records loaded, the first relist done), on a
# copy of a state dir holding 100,000 events that `cargo bench --bench journal --
# open_after_restart` leaves under target/, against `plegd sim --pods 200` (the pods
# the state dir's records name are gone, so the first relist reports them removed).
# Prints one line per run: milliseconds, and plegd's RSS once ready.
#
#   bash scripts/restart-time.sh [runs=3] [state dir=target/bench-state-100k_realistic_events_200_pods]
set -euo pipefail
runs=${1:-3}
cd "$(dirname "$0")/.."
src=${2:-target/bench-state-100k_realistic_events_200_pods}
[ -f "$src/journal.db" ] || { echo "no journal in $src: run cargo bench --bench journal -- open_after_restart" >&2; exit 1; }
cargo build --release --quiet
bin=target/release/plegd
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
$bin sim --listen "unix://$dir/cri.sock" --pods 200 --churn-per-sec 0 >/dev/null 2>&1 &
while [ ! -S "$dir/cri.sock" ]; do sleep 0.1; done
echo "# state dir $src: $(du -sh "$src" | cut -f1)"
for i in $(seq "$runs"); do
  rm -rf "$dir/state" && cp -r "$src" "$dir/state"
  sync
  port=$((20000 + RANDOM % 20000))
  t0=$(date +%s%N)
  $bin run --runtime-endpoint "unix://$dir/cri.sock" --listen "unix://$dir/plegd.sock" \
    --admin-addr "127.0.0.1:$port" --state-dir "$dir/state" >"$dir/plegd-$i.log" 2>&1 &
  pid=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$port/readyz")" = 200 ]; do sleep 0.01; done
  t1=$(date +%s%N)
  rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
  echo "run $i: ready after $(( (t1 - t0) / 1000000 )) ms, RSS $rss MiB"
  kill -TERM "$pid" && wait "$pid" || true
done
