#!/usr/bin/env bash
# Stock gRPC clients in their own languages, each with its library's DEFAULT options (no
# authority override, no channel options), against plegd's unix socket: Python grpcio
# (grpc-core), Java grpc-netty over epoll, Node @grpc/grpc-js, and grpcurl through reflection.
# Go is covered by clients/go.
#
#   PLEGD_BIN=target/debug/plegd bash tests/clients/run.sh
#
# PLEGD_BIN: the plegd binary (default target/debug/plegd, relative to the repo root).
# PLEGD_CLIENTS: which clients to run (default "python java node grpcurl").
# PLEGD_CLIENTS_KEEP=1 keeps the temp dir (sockets, logs) for a look afterwards.
# Installs what is missing: grpcio & co. with pip, the node packages with npm ci, the Java
# dependencies with Maven, grpcurl with `go install` into a private GOBIN. A client whose
# toolchain (python3, java+mvn, node+npm, go) is missing FAILS; nothing is skipped.
# Ends with "N passed, M failed" and exits non-zero if any client failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/tests/clients

GRPCURL_VERSION=v1.9.4
CLIENT_TIMEOUT=${PLEGD_CLIENT_TIMEOUT:-120}
INSTALL_TIMEOUT=${PLEGD_INSTALL_TIMEOUT:-1200}
CLIENTS=${PLEGD_CLIENTS:-python java node grpcurl}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/plegd-clients

BIN=${PLEGD_BIN:-target/debug/plegd}
case $BIN in /*) ;; *) BIN=$ROOT/$BIN ;; esac
if [ ! -x "$BIN" ]; then
  echo "tests/clients: no plegd binary at $BIN (set PLEGD_BIN, or build it with cargo build)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

DIR=$(mktemp -d /tmp/plegd-clients.XXXXXX)
SOCK=$DIR/plegd.sock
TARGET=unix://$SOCK
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "${PLEGD_CLIENTS_KEEP:-}" ]; then echo "tests/clients: kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A PREP_ERR=()
RESULTS=()
passed=0
failed=0
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "toolchain missing: $t not found on PATH" >&2; return 1; }
  done
}
record() { # name ok|fail seconds note
  if [ "$2" = ok ]; then
    passed=$((passed + 1)); RESULTS+=("PASS  $1 ($3)")
  else
    failed=$((failed + 1)); RESULTS+=("FAIL  $1 ($3)${4:+: $4}")
  fi
}

# ---- installs (before plegd starts, so that downloads don't eat the clients' time) ----------

prep_python() {
  need python3 || return 1
  if ! python3 -c 'import grpc, grpc_tools, grpc_health.v1, grpc_reflection.v1alpha' 2>/dev/null; then
    echo "installing grpcio grpcio-tools grpcio-health-checking grpcio-reflection (pip)"
    local pkgs=(grpcio grpcio-tools grpcio-health-checking grpcio-reflection)
    local pip=(python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore)
    timeout "$INSTALL_TIMEOUT" "${pip[@]}" "${pkgs[@]}" ||
      timeout "$INSTALL_TIMEOUT" "${pip[@]}" --break-system-packages "${pkgs[@]}" || return 1
  fi
  python3 -c 'import grpc, grpc_tools, grpc_health.v1, grpc_reflection.v1alpha'
}

prep_java() {
  need java mvn || return 1
  local major
  major=$(java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ { print $2 }')
  if [ "${major%%.*}" -lt 17 ] 2>/dev/null; then
    echo "toolchain too old: java $major (needs 17)" >&2
    return 1
  fi
  # Debian's Maven 3.8 prints bare colour resets even when quiet and told no colour.
  timeout "$INSTALL_TIMEOUT" mvn -B -q -Dstyle.color=never -f "$HERE/java/pom.xml" compile 2>&1 |
    sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' || return 1
  [ -s "$HERE/java/target/classpath.txt" ]
}

prep_node() {
  need node npm || return 1
  (cd "$HERE/node" && timeout "$INSTALL_TIMEOUT" npm ci --no-audit --no-fund --loglevel=error)
}

GRPCURL=$CACHE/grpcurl-$GRPCURL_VERSION/grpcurl
prep_grpcurl() {
  [ -x "$GRPCURL" ] && return 0
  need go || return 1
  echo "installing grpcurl $GRPCURL_VERSION (go install)"
  GOBIN=$(dirname "$GRPCURL") timeout "$INSTALL_TIMEOUT" \
    go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
}

for c in $CLIENTS; do
  case $c in python | java | node | grpcurl) ;; *) echo "tests/clients: unknown client $c" >&2; exit 2 ;; esac
  echo "== prepare $c"
  t0=$(now)
  if ! "prep_$c"; then PREP_ERR[$c]="could not prepare (see above)"; fi
  echo "   ($(since "$t0"))"
done

# ---- plegd: a simulated runtime with churn, and the sidecar on a socket of our own ----------

echo "== plegd: $BIN"
"$BIN" sim --listen "unix://$DIR/cri.sock" --pods 5 --churn-per-sec 5 >"$DIR/sim.log" 2>&1 &
PIDS+=($!)
run_args=(run --runtime-endpoint "unix://$DIR/cri.sock" --listen "$TARGET"
  --admin-addr 127.0.0.1:0 --state-dir "" --log-format text)
# Older builds had no --debug-addr; accepting them lets this harness show what they refuse.
if "$BIN" run --help | grep -q -- '--debug-addr'; then run_args+=(--debug-addr 127.0.0.1:0); fi
"$BIN" "${run_args[@]}" >"$DIR/plegd.log" 2>&1 &
PLEGD_PID=$!
PIDS+=("$PLEGD_PID")

plegd_died() {
  echo "tests/clients: plegd is not running; its log:" >&2
  tail -n 30 "$DIR/plegd.log" >&2
  echo "0 passed, $(wc -w <<<"$CLIENTS") failed"
  exit 1
}
# Ready: the socket exists and /readyz on the admin address (read off plegd's start line) is 200.
t0=$(now)
admin=
ready=
for _ in $(seq 1 600); do
  kill -0 "$PLEGD_PID" 2>/dev/null || plegd_died
  [ -n "$admin" ] || admin=$(grep -o 'admin=[0-9.]*:[0-9]*' "$DIR/plegd.log" | head -n 1 | cut -d= -f2 || true)
  if [ -S "$SOCK" ] && [ -n "$admin" ]; then
    code=$(exec 3<>"/dev/tcp/${admin%:*}/${admin##*:}" &&
      printf 'GET /readyz HTTP/1.0\r\nHost: plegd\r\n\r\n' >&3 && head -n 1 <&3 | awk '{ print $2 }') || code=
    if [ "$code" = 200 ]; then ready=1; break; fi
  fi
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "tests/clients: plegd not ready after 60 s (socket: $([ -S "$SOCK" ] && echo yes || echo no), admin: ${admin:-unknown})" >&2
  tail -n 30 "$DIR/plegd.log" >&2
  echo "0 passed, $(wc -w <<<"$CLIENTS") failed"
  exit 1
fi
echo "   ready in $(since "$t0"): socket $SOCK, admin $admin"

# ---- the clients ------------------------------------------------------------------------------

run_python() { timeout "$CLIENT_TIMEOUT" python3 "$HERE/python/stock_client.py" "$TARGET"; }

run_java() {
  timeout "$CLIENT_TIMEOUT" java -cp "$HERE/java/target/classes:$(cat "$HERE/java/target/classpath.txt")" \
    dev.plegd.clients.StockClient "$SOCK"
}

run_node() {
  (cd "$HERE/node" && PLEGD_SOCKET=$SOCK timeout "$CLIENT_TIMEOUT" node --test --test-reporter=spec stock_client.test.js)
}

# grpcurl with no proto files: everything it knows comes from the server's reflection.
run_grpcurl() {
  # grpcurl [flags] address verb: -unix says the address is a socket path.
  local out g=(timeout 30 "$GRPCURL" -plaintext -unix)
  out=$("${g[@]}" "$SOCK" list) || return 1
  echo "$out" | sed 's/^/grpcurl list: /'
  grep -qx 'plegd.v1.PodLifecycle' <<<"$out" || { echo "list lacks plegd.v1.PodLifecycle" >&2; return 1; }
  grep -qx 'grpc.health.v1.Health' <<<"$out" || { echo "list lacks grpc.health.v1.Health" >&2; return 1; }
  out=$("${g[@]}" "$SOCK" describe plegd.v1.PodLifecycle) || return 1
  local m
  for m in Watch ListPods GetPodStatus; do
    grep -q "rpc $m " <<<"$out" || { echo "describe lacks rpc $m:"$'\n'"$out" >&2; return 1; }
  done
  echo "grpcurl describe plegd.v1.PodLifecycle: $(grep -c '^ *rpc ' <<<"$out") rpcs"
  out=$("${g[@]}" "$SOCK" plegd.v1.PodLifecycle/ListPods) || return 1
  grep -qE '^  "revision": "[1-9][0-9]*",?$' <<<"$out" || { echo "ListPods without a revision:"$'\n'"$out" >&2; return 1; }
  grep -qE '^  "epoch": "[0-9]+",?$' <<<"$out" || { echo "ListPods without an epoch:"$'\n'"$out" >&2; return 1; }
  echo "grpcurl ListPods: $(grep -c '^      "uid"' <<<"$out") pods, $(grep -E '^  "revision"' <<<"$out" | tr -d ' ,')"
  out=$("${g[@]}" "$SOCK" grpc.health.v1.Health/Check) || return 1
  grep -q '"status": "SERVING"' <<<"$out" || { echo "health is not SERVING:"$'\n'"$out" >&2; return 1; }
  echo "grpcurl Health/Check: SERVING"
}

for c in $CLIENTS; do
  echo "== $c"
  t0=$(now)
  if [ -n "${PREP_ERR[$c]:-}" ]; then
    echo "FAIL $c: ${PREP_ERR[$c]}" >&2
    record "$c" fail "$(since "$t0")" "${PREP_ERR[$c]}"
    continue
  fi
  rc=0
  "run_$c" || rc=$?
  if [ "$rc" = 0 ]; then record "$c" ok "$(since "$t0")"; else record "$c" fail "$(since "$t0")" "exit $rc"; fi
done

kill -0 "$PLEGD_PID" 2>/dev/null || { echo "tests/clients: plegd exited during the run" >&2; failed=$((failed + 1)); }
if [ "$failed" -gt 0 ]; then
  echo "== plegd's log (last 30 lines)"
  tail -n 30 "$DIR/plegd.log"
fi
echo "== results"
printf '%s\n' "${RESULTS[@]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
