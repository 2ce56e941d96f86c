#!/usr/bin/env bash
# Runs plegd's end-to-end suite against real containerd 1.6, 1.7 and 2.1. Installs what it
# needs (apt), starts each containerd privately, runs the ignored e2e tests, tears down.
# Extra arguments go to the test binary (a test-name filter, say).
set -euo pipefail
cd "$(dirname "$0")/../.."
CTL="$PWD/tests/e2e/containerd.sh"
[ "$(id -u)" = 0 ] || { echo "tests/e2e/run.sh: needs root to run containerd" >&2; exit 1; }
"$CTL" install
cargo test --locked --test e2e_containerd --no-run
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
  if grep -q "test result: ok. 0 passed" "/tmp/plegd-e2e-$v.log"; then
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
