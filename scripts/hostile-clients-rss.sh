#!/usr/bin/env bash
# plegd's resident memory under hostile clients, all as separate processes of the
# release binary: a journal of N events on disk (`plegd sim --pods 200 --churn-per-sec
# 200` until the revision reaches N), then R clients that resume from revision 1 and
# never read (their output goes to a pipe nobody drains), W live watchers that stall the
# same way, and H half-open HTTP requests on the admin port. Prints plegd's RSS before,
# and its peak and final RSS over the following seconds.
#
#   bash scripts/hostile-clients-rss.sh [events=21000] [resumers=60] [watchers=200] [half_open=2000] [seconds=60]
#   PLEGD_BIN=/path/to/other/plegd bash scripts/hostile-clients-rss.sh …   # the same against another build
#   PLEGD_HOSTILE_CHURN=1 bash scripts/hostile-clients-rss.sh 2000 0 100 0 60  # stalled live watchers under churn
set -euo pipefail
events=${1:-21000}
resumers=${2:-60}
watchers=${3:-200}
half_open=${4:-2000}
secs=${5:-60}
cd "$(dirname "$0")/.."
if [ -z "${PLEGD_BIN:-}" ]; then cargo build --release --quiet; fi
bin=${PLEGD_BIN:-$PWD/target/release/plegd}   # PLEGD_BIN: another build, to compare
dir=$(mktemp -d)
sim=
trap '[ -n "$sim" ] && kill -CONT $sim 2>/dev/null; kill $(jobs -p) 2>/dev/null; pkill -f "$dir" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
ulimit -n 65536 2>/dev/null || true
port=$((20000 + RANDOM % 20000))
$bin sim --listen "unix://$dir/cri.sock" --pods 200 --churn-per-sec 200 >/dev/null 2>&1 &
sim=$!
while [ ! -S "$dir/cri.sock" ]; do sleep 0.1; done
$bin run --runtime-endpoint "unix://$dir/cri.sock" --listen "unix://$dir/plegd.sock" \
  --admin-addr "127.0.0.1:$port" $($bin run --help | grep -q -- --debug-addr && echo --debug-addr "127.0.0.1:$((port + 1))") \
  --state-dir "$dir/state" >"$dir/plegd.log" 2>&1 &
pid=$!
while [ ! -S "$dir/plegd.sock" ]; do sleep 0.1; done
rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status"; }
rev() { curl -s "127.0.0.1:$port/metrics" | awk '/^plegd_journal_revision / {print $2}'; }
while [ "$(rev)" -lt "$events" ]; do sleep 1; done
# A quiet runtime from here, so what grows is the clients' doing; PLEGD_HOSTILE_CHURN=1
# keeps the churn going (what stalled live watchers would hold).
[ "${PLEGD_HOSTILE_CHURN:-0}" = 1 ] || kill -STOP $sim
sleep 2
echo "# journal at revision $(rev); plegd RSS before the clients: $(rss) MiB"
for _ in $(seq "$resumers"); do
  ( $bin watch --socket "unix://$dir/plegd.sock" --since 1 -o json | (exec -a "stall-$dir" sleep 3600) ) >/dev/null 2>&1 &
done
for _ in $(seq "$watchers"); do
  ( $bin watch --socket "unix://$dir/plegd.sock" -o json | (exec -a "stall-$dir" sleep 3600) ) >/dev/null 2>&1 &
done
[ "$half_open" -gt 0 ] && python3 - "$port" "$half_open" "$secs" <<'PY' &
import socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held = []
end = time.time() + secs
while time.time() < end:
    while len(held) < n:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            held.append(s)
        except OSError:
            break
    time.sleep(1)
    alive = []
    for s in held:
        try:
            s.sendall(b"a")
            alive.append(s)
        except OSError:
            s.close()
    held = alive
PY
peak=0
for _ in $(seq "$secs"); do
  sleep 1
  r=$(rss)
  peak=$(awk -v a="$peak" -v b="$r" 'BEGIN {print (b > a) ? b : a}')
done
echo "# clients: $resumers resuming from revision 1, $watchers live, $half_open half-open HTTP; over ${secs}s"
echo "peak_rss_mib $peak"
echo "final_rss_mib $(rss)"
echo "watch_clients $(curl -s "127.0.0.1:$port/metrics" | awk '/^plegd_watch_clients / {print $2}')"
