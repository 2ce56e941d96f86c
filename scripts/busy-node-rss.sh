#!/usr/bin/env bash
# Resident memory of plegd on a busy node, sampled over time: `plegd sim --pods 200
# --churn-per-sec 50` (about 115 events/s), `plegd run` with default flags (its journal
# in a temporary state dir) and 3 `plegd watch` clients, all as separate processes of the
# release binary. Prints one line per sample: seconds, RSS in MiB, journal revision, and
# plegd's CPU seconds so far (user + system).
#
#   bash scripts/busy-node-rss.sh [seconds=900] [sample every=30]
#
# PLEGD_BIN runs that binary instead of building this tree (a before/after pair side by
# side); the build honours CARGO_TARGET_DIR.
set -euo pipefail
secs=${1:-900}
every=${2:-30}
cd "$(dirname "$0")/.."
if [ -n "${PLEGD_BIN:-}" ]; then
  bin=$PLEGD_BIN
else
  cargo build --release --quiet
  bin=${CARGO_TARGET_DIR:-target}/release/plegd
fi
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 20000))
$bin sim --listen "unix://$dir/cri.sock" --pods 200 --churn-per-sec 50 >/dev/null 2>&1 &
while [ ! -S "$dir/cri.sock" ]; do sleep 0.1; done
$bin run --runtime-endpoint "unix://$dir/cri.sock" --listen "unix://$dir/plegd.sock" \
  --admin-addr "127.0.0.1:$port" --state-dir "$dir/state" >"$dir/plegd.log" 2>&1 &
pid=$!
while [ ! -S "$dir/plegd.sock" ]; do sleep 0.1; done
for _ in 1 2 3; do $bin watch --socket "unix://$dir/plegd.sock" >/dev/null 2>&1 & done
echo "# seconds rss_mib revision cpu_s (plegd pid $pid, state dir $dir/state)"
start=$(date +%s)
while :; do
  sleep "$every"
  now=$(( $(date +%s) - start ))
  rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
  rev=$(curl -s "127.0.0.1:$port/metrics" | awk '/^plegd_journal_revision / {print $2}')
  cpu=$(awk '{printf "%.1f", ($14 + $15) / 100}' "/proc/$pid/stat")
  echo "$now $rss $rev $cpu"
  [ "$now" -ge "$secs" ] && break
done
du -sh "$dir/state" | sed 's/^/# state dir: /'
