#!/usr/bin/env bash
# Runs plegd's end-to-end suite against real containerd 1.6, 1.7 and 2.1 (and plegd as an
# NRI plugin of 1.7 and 2.1, each on an NRI socket of its own). Installs what it
# needs (apt), starts each containerd privately, runs the ignored e2e tests, tears down.
# plegd as a pod from its image runs under a real kubelet: tests/kubelet/run.sh.
# On the versions in PLEGD_SOAK_VERSIONS (default 2.1) it runs the soak under chaos
# (tests/soak.rs) for PLEGD_SOAK_SECS (default 300) when no test filter is given.
# Extra arguments go to the test binaries (a test-name filter, say).
set -euo pipefail
cd "$(dirname "$0")/../.."
CTL="$PWD/tests/e2e/containerd.sh"
[ "$(id -u)" = 0 ] || { echo "tests/e2e/run.sh: needs root to run containerd" >&2; exit 1; }
"$CTL" install
cargo test --locked --test e2e_containerd --test e2e_lookup --test e2e_nri --test soak --no-run
# NRI's own Go plugin stub as a bare observer, the way tests/e2e_nri.rs measures what any
# NRI plugin costs the runtime beside what plegd costs it.
PLEGD_E2E_NRI_REFERENCE=$(PLEGD_COLLECTOR_SRC="$PWD/tests/e2e/nri-reference" \
  PLEGD_OTLP_COLLECTOR_BIN=target/nri-reference/nri-reference bash tests/otlp/build-collector.sh | tail -1)
export PLEGD_E2E_NRI_REFERENCE
failed=()
export PLEGD_E2E_FIGURES=${PLEGD_E2E_FIGURES:-/tmp/plegd-e2e-figures.txt}
: >"$PLEGD_E2E_FIGURES"
# A failing test prints its captured debug log.
export RUST_LOG=${RUST_LOG:-plegd=debug}
filter=("$@")
# What passed in a log (0 for a binary that printed no result: it aborted).
passed() { { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed" "$1" || true; } | awk '{s += $4} END {print s + 0}'; }
# suite NAME LOG CARGO-TEST-ARGS...: one test binary against containerd $v, its output in
# LOG; a failure is recorded as NAME, and what passed is counted.
suite() {
  local name=$1 log=$2 rc
  shift 2
  set +e
  PLEGD_E2E_ENDPOINT=$endpoint PLEGD_E2E_VERSION=$v PLEGD_E2E_CTL=$CTL PLEGD_E2E_METRICS=$metrics \
    cargo test --locked "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || failed+=("$name")
  ran=$((ran + $(passed "$log")))
}
for v in ${PLEGD_E2E_VERSIONS:-1.6 1.7 2.1}; do
  echo "== containerd $v"
  # containerd's own metrics, each call's time on its clock (tests/e2e_nri.rs reads them).
  metrics=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  endpoint=$(PLEGD_E2E_METRICS_ADDR=$metrics "$CTL" start "$v")
  ran=0
  suite "$v" "/tmp/plegd-e2e-$v.log" --test e2e_containerd -- --ignored --test-threads=1 "${filter[@]}"
  echo "== containerd $v: container lookup"
  suite "$v (lookup)" "/tmp/plegd-e2e-lookup-$v.log" \
    --test e2e_lookup -- --ignored --test-threads=1 --nocapture "${filter[@]}"
  if [ "$v" != 1.6 ]; then
    echo "== containerd $v: plegd as an NRI plugin"
    suite "$v (nri)" "/tmp/plegd-e2e-nri-$v.log" --test e2e_nri -- --ignored --test-threads=1 --nocapture "${filter[@]}"
  fi
  if [[ " ${PLEGD_SOAK_VERSIONS-2.1} " == *" $v "* ]] && [ ${#filter[@]} = 0 ]; then
    echo "== containerd $v: the soak under chaos (${PLEGD_SOAK_SECS:-300} s)"
    PLEGD_SOAK_SECS=${PLEGD_SOAK_SECS:-300} suite "$v (soak)" "/tmp/plegd-e2e-soak-$v.log" \
      --test soak -- --ignored --nocapture
  fi
  if [ "$ran" = 0 ]; then
    echo "e2e: no test ran against containerd $v (filter: $*)" >&2
    failed+=("$v")
  fi
  "$CTL" stop "$v"
done
echo "== figures"
cat "$PLEGD_E2E_FIGURES"
if [ ${#failed[@]} -gt 0 ]; then
  echo "e2e: failed against containerd ${failed[*]}" >&2
  exit 1
fi
echo "e2e: all scenarios passed against containerd ${PLEGD_E2E_VERSIONS:-1.6 1.7 2.1}"
