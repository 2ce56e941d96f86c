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
failed=()
export PLEGD_E2E_FIGURES=${PLEGD_E2E_FIGURES:-/tmp/plegd-e2e-figures.txt}
: >"$PLEGD_E2E_FIGURES"
# A failing test prints its captured debug log.
export RUST_LOG=${RUST_LOG:-plegd=debug}
for v in ${PLEGD_E2E_VERSIONS:-1.6 1.7 2.1}; do
  echo "== containerd $v"
  endpoint=$("$CTL" start "$v")
  set +e
  PLEGD_E2E_ENDPOINT=$endpoint PLEGD_E2E_VERSION=$v PLEGD_E2E_CTL=$CTL \
    cargo test --locked --test e2e_containerd -- --ignored --test-threads=1 "$@" 2>&1 \
    | tee "/tmp/plegd-e2e-$v.log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || failed+=("$v")
  passed() { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed" "$1" | awk '{s += $4} END {print s + 0}'; }
  ran=$(passed "/tmp/plegd-e2e-$v.log")
  echo "== containerd $v: container lookup"
  set +e
  PLEGD_E2E_ENDPOINT=$endpoint PLEGD_E2E_VERSION=$v PLEGD_E2E_CTL=$CTL \
    cargo test --locked --test e2e_lookup -- --ignored --test-threads=1 --nocapture "$@" 2>&1 \
    | tee "/tmp/plegd-e2e-lookup-$v.log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || failed+=("$v (lookup)")
  ran=$((ran + $(passed "/tmp/plegd-e2e-lookup-$v.log")))
  if [ "$v" != 1.6 ]; then
    echo "== containerd $v: plegd as an NRI plugin"
    set +e
    PLEGD_E2E_ENDPOINT=$endpoint PLEGD_E2E_VERSION=$v PLEGD_E2E_CTL=$CTL \
      cargo test --locked --test e2e_nri -- --ignored --test-threads=1 --nocapture "$@" 2>&1 \
      | tee "/tmp/plegd-e2e-nri-$v.log"
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" = 0 ] || failed+=("$v (nri)")
    ran=$((ran + $(passed "/tmp/plegd-e2e-nri-$v.log")))
  fi
  if [[ " ${PLEGD_SOAK_VERSIONS-2.1} " == *" $v "* ]] && [ -z "$*" ]; then
    echo "== containerd $v: the soak under chaos (${PLEGD_SOAK_SECS:-300} s)"
    set +e
    PLEGD_E2E_ENDPOINT=$endpoint PLEGD_E2E_VERSION=$v PLEGD_E2E_CTL=$CTL PLEGD_SOAK_SECS=${PLEGD_SOAK_SECS:-300} \
      cargo test --locked --test soak -- --ignored --nocapture 2>&1 | tee "/tmp/plegd-e2e-soak-$v.log"
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" = 0 ] || failed+=("$v (soak)")
    ran=$((ran + $(passed "/tmp/plegd-e2e-soak-$v.log")))
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
