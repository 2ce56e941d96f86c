#!/usr/bin/env bash
# plegd's pages in a real browser: headless Chromium (Debian's package) driven by
# playwright-core, against `plegd run` with a state dir on `plegd sim --trouble` (a
# crash-looping pod, an OOM-killed container, a pod with markup in its labels), after one
# restart of plegd so that the restart is in the history. Asserts what a person sees.
#
#   PLEGD_BIN=target/release/plegd bash tests/browser/run.sh
#
# PLEGD_BIN: the plegd binary (default target/debug/plegd, relative to the repo root); this
#   script builds nothing.
# ARTIFACTS: where screenshots (and the logs, on failure) go (default tests/browser/out).
# PLEGD_BROWSER_KEEP=1 keeps the temp dir (sockets, state dir, logs) for a look afterwards.
# Installs what is missing: chromium with apt-get, playwright-core with npm ci. A missing
# component (node, npm, chromium that cannot be installed) FAILS; nothing is skipped.
# Ends with "N passed, M failed" and exits non-zero if any check failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/tests/browser
INSTALL_TIMEOUT=${PLEGD_INSTALL_TIMEOUT:-1200}
TEST_TIMEOUT=${PLEGD_BROWSER_TIMEOUT:-600}
ARTIFACTS=${ARTIFACTS:-$HERE/out}
case $ARTIFACTS in /*) ;; *) ARTIFACTS=$ROOT/$ARTIFACTS ;; esac
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

fail_setup() {
  echo "tests/browser: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

BIN=${PLEGD_BIN:-target/debug/plegd}
case $BIN in /*) ;; *) BIN=$ROOT/$BIN ;; esac
[ -x "$BIN" ] || fail_setup "no plegd binary at $BIN (set PLEGD_BIN, or build it with cargo build)"

# ---- installs --------------------------------------------------------------------------------

echo "== prepare"
for t in node npm; do
  command -v "$t" >/dev/null || fail_setup "MISSING: $t not found on PATH (Node.js 20 or newer is needed)"
done
if [ ! -x "$CHROMIUM" ]; then
  echo "chromium missing at $CHROMIUM: installing Debian's chromium (apt-get)"
  if command -v apt-get >/dev/null; then
    timeout "$INSTALL_TIMEOUT" apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" apt-get install -y -qq chromium >/dev/null || true
  fi
  [ -x "$CHROMIUM" ] || fail_setup "MISSING: chromium could not be installed at $CHROMIUM (apt-get install chromium)"
fi
"$CHROMIUM" --version 2>/dev/null || true
if [ ! -f "$HERE/node_modules/playwright-core/package.json" ] ||
  ! node -e "process.exit(require('$HERE/node_modules/playwright-core/package.json').version === require('$HERE/package.json').dependencies['playwright-core'] ? 0 : 1)"; then
  (cd "$HERE" && timeout "$INSTALL_TIMEOUT" npm ci --no-audit --no-fund --loglevel=error) ||
    fail_setup "MISSING: npm ci of playwright-core failed"
fi
echo "playwright-core $(node -p "require('$HERE/node_modules/playwright-core/package.json').version")"

# ---- plegd on the simulated runtime, restarted once ------------------------------------------

DIR=$(mktemp -d /tmp/plegd-browser.XXXXXX)
SIM_PID=
PLEGD_PID=
cleanup() {
  local pid
  for pid in $PLEGD_PID $SIM_PID; do kill "$pid" 2>/dev/null || true; done
  for pid in $PLEGD_PID $SIM_PID; do wait "$pid" 2>/dev/null || true; done
  if [ -n "${PLEGD_BROWSER_KEEP:-}" ]; then echo "tests/browser: kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$ARTIFACTS"

echo "== plegd: $BIN"
"$BIN" sim --listen "unix://$DIR/cri.sock" --pods 6 --churn-per-sec 1 --trouble >"$DIR/sim.log" 2>&1 &
SIM_PID=$!

DEBUG=
start_plegd() { # log file
  "$BIN" run --runtime-endpoint "unix://$DIR/cri.sock" --listen "unix://$DIR/plegd.sock" \
    --admin-addr 127.0.0.1:0 --debug-addr 127.0.0.1:0 --state-dir "$DIR/state" --log-format text >"$1" 2>&1 &
  PLEGD_PID=$!
  local admin= code
  DEBUG=
  for _ in $(seq 1 600); do
    kill -0 "$PLEGD_PID" 2>/dev/null || { tail -n 30 "$1" >&2; fail_setup "plegd exited at start"; }
    [ -n "$admin" ] || admin=$(grep -o 'admin=[0-9.]*:[0-9]*' "$1" | head -n 1 | cut -d= -f2 || true)
    [ -n "$DEBUG" ] || DEBUG=$(grep -o 'debug=[0-9.]*:[0-9]*' "$1" | head -n 1 | cut -d= -f2 || true)
    if [ -n "$admin" ] && [ -n "$DEBUG" ]; then
      code=$(exec 3<>"/dev/tcp/${admin%:*}/${admin##*:}" &&
        printf 'GET /readyz HTTP/1.0\r\nHost: plegd\r\n\r\n' >&3 && head -n 1 <&3 | awk '{ print $2 }') || code=
      [ "$code" = 200 ] && return 0
    fi
    sleep 0.1
  done
  tail -n 30 "$1" >&2
  fail_setup "plegd not ready after 60 s (admin: ${admin:-unknown}, debug: ${DEBUG:-unknown})"
}

start_plegd "$DIR/plegd-1.log"
echo "   first run ready, debug listener $DEBUG; letting the pods get in trouble"
sleep 8
kill -TERM "$PLEGD_PID"
wait "$PLEGD_PID" 2>/dev/null || true
sleep 3
start_plegd "$DIR/plegd-2.log"
echo "   restarted (same state dir): debug listener $DEBUG"

# ---- the browser -----------------------------------------------------------------------------

echo "== headless Chromium"
rc=0
(cd "$HERE" && DEBUG_URL="http://$DEBUG" ARTIFACTS="$ARTIFACTS" CHROMIUM="$CHROMIUM" \
  timeout "$TEST_TIMEOUT" node pages.test.mjs) | tee "$DIR/browser.out" || rc=$?
if ! tail -n 1 "$DIR/browser.out" | grep -qE '^[0-9]+ passed, [0-9]+ failed$'; then
  echo "tests/browser: the browser run ended without its count (exit $rc)" >&2
  echo "0 passed, 1 failed"
  rc=1
fi
if ! kill -0 "$PLEGD_PID" 2>/dev/null; then
  echo "tests/browser: plegd exited during the run" >&2
  echo "0 passed, 1 failed"
  rc=1
fi
if [ "$rc" != 0 ]; then
  cp "$DIR"/*.log "$ARTIFACTS"/ 2>/dev/null || true
  echo "== plegd's log (last 30 lines)"
  tail -n 30 "$DIR/plegd-2.log"
fi
echo "screenshots: $ARTIFACTS"
exit "$rc"
