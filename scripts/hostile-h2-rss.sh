#!/usr/bin/env bash
# plegd's resident memory under raw HTTP/2 peers on its API socket, the release binary
# against the simulated runtime with 110 pods, quiet:
#
#   idle:   P processes each open C connections that send the preface and SETTINGS,
#           open no stream and answer every PING (a client that leaks a channel per call)
#   unread: P processes each open C connections with S `Watch(since=0)` streams each,
#           announce windows of 2 GiB and never read the socket again
#
# Prints plegd's RSS before the peers, its peak over the following seconds, the
# connections plegd kept open, and what it counted.
#
#   bash scripts/hostile-h2-rss.sh idle   [procs=16] [conns=500] [seconds=30]
#   bash scripts/hostile-h2-rss.sh unread [procs=16] [conns=64]  [seconds=30] [streams=1]
#   PLEGD_BIN=/path/to/other/plegd bash scripts/hostile-h2-rss.sh …   # the same against another build
set -euo pipefail
mode=${1:?idle or unread}
procs=${2:-16}
conns=${3:-$([ "$mode" = idle ] && echo 500 || echo 64)}
secs=${4:-30}
streams=${5:-1}
cd "$(dirname "$0")/.."
if [ -z "${PLEGD_BIN:-}" ]; then cargo build --release --quiet; fi
bin=${PLEGD_BIN:-$PWD/target/release/plegd}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
ulimit -n 65536 2>/dev/null || true
port=$((20000 + RANDOM % 20000))
$bin sim --listen "unix://$dir/cri.sock" --pods 110 --churn-per-sec 0 >/dev/null 2>&1 &
while [ ! -S "$dir/cri.sock" ]; do sleep 0.1; done
$bin run --runtime-endpoint "unix://$dir/cri.sock" --listen "unix://$dir/plegd.sock" \
  --admin-addr "127.0.0.1:$port" --debug-addr "127.0.0.1:$((port + 1))" --state-dir "$dir/state" >"$dir/plegd.log" 2>&1 &
pid=$!
until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
sleep 3
rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status"; }
echo "# $mode: $procs processes x $conns connections$([ "$mode" = unread ] && echo " x $streams streams"); plegd RSS before: $(rss) MiB"
for _ in $(seq "$procs"); do
  python3 - "$dir/plegd.sock" "$mode" "$conns" "$streams" "$secs" <<'PY' &
import os, select, socket, struct, sys, time
path, mode, conns, streams, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def frame(typ, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload
def lit(name, value):  # a literal header field, never indexed, new name, no Huffman
    return bytes([0x10, len(name)]) + name + bytes([len(value)]) + value
hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, struct.pack(">HI", 4, 2**31 - 1)) \
    + frame(8, 0, 0, struct.pack(">I", 2**31 - 1 - 65535))
headers = lit(b":method", b"POST") + lit(b":scheme", b"http") + lit(b":path", b"/plegd.v1.PodLifecycle/Watch") \
    + lit(b":authority", b"localhost") + lit(b"content-type", b"application/grpc") + lit(b"te", b"trailers")
held = []
for _ in range(conns):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        out = hello
        if mode == "unread":
            for i in range(streams):
                sid = 2 * i + 1
                out += frame(1, 4, sid, headers) + frame(0, 1, sid, b"\0\0\0\0\0")
        s.sendall(out)
        held.append(s)
    except OSError:
        pass
end = time.time() + secs
bufs = {s: b"" for s in held}
while time.time() < end:
    if mode == "unread":
        time.sleep(0.5)
        continue
    live = [s for s in held if s.fileno() >= 0]
    if not live:
        time.sleep(0.5)
        continue
    r, _, _ = select.select(live, [], [], 0.5)
    for s in r:
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            s.close()
            continue
        b = bufs[s] + data
        while len(b) >= 9:
            n = int.from_bytes(b[:3], "big")
            if len(b) < 9 + n:
                break
            typ, flags, payload = b[3], b[4], b[9:9 + n]
            if typ == 6 and not flags & 1:
                s.sendall(frame(6, 1, 0, payload))
            b = b[9 + n:]
        bufs[s] = b
PY
done
peak=0
for _ in $(seq "$secs"); do
  sleep 1
  now=$(rss)
  peak=$(awk -v a="$peak" -v b="$now" 'BEGIN { print (b > a ? b : a) }')
done
metric() { curl -s "127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
echo "# peak RSS $peak MiB, final $(rss) MiB; open connections: $(metric plegd_api_open_connections); over cap: $(metric plegd_api_connections_over_cap_total); Watch bytes ahead: $(metric plegd_api_watch_ahead_bytes)"
