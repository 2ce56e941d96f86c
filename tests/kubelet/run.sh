#!/usr/bin/env bash
# plegd beside a real kubelet on real containerd: the kubelet's PLEG is the oracle of
# plegd's stream, and plegd runs as the kubelet's static pod (tests/kubelet/harness.py
# says what a run does and checks). For each containerd version it starts a private
# containerd with a pod network (Debian's CNI plugins: bridge, host-local, portmap) and
# its gRPC metrics on, imports plegd's image, and runs the harness.
#
#   bash tests/kubelet/run.sh                   containerd 2.1 (300 s) and 1.7 (150 s)
#   PLEGD_KUBELET_VERSIONS="2.1" PLEGD_KUBELET_SECS=150 bash tests/kubelet/run.sh
#   PLEGD_KUBELET_BENCH=110 PLEGD_KUBELET_VERSIONS=2.1 bash tests/kubelet/run.sh
#       instead of the cases, what plegd costs beside the kubelet at 110 steady pods: the
#       CPU of each over one window, and the CRI calls containerd served with plegd and
#       without it, per method (BENCHMARKS.md, "Beside a real kubelet")
#
# Needs root. Builds what it lacks: the kubelet (tests/kubelet/build.sh, cached by
# version), plegd's image (scripts/build-image.sh, unless PLEGD_E2E_IMAGE names one; the
# plegd beside the kubelet is then the image's binary, else PLEGD_KUBELET_PLEGD or the
# release build). Keeps each run's files under target/kubelet-runs/ on a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "tests/kubelet/run.sh: needs root (containerd, the kubelet)" >&2; exit 1; }
CTL="$PWD/tests/e2e/containerd.sh"
export PLEGD_E2E_INSTANCE=kubelet

"$CTL" install
if ! [ -x /usr/lib/cni/bridge ] || ! [ -x /usr/lib/cni/host-local ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null
fi
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
kubelet=$(bash tests/kubelet/build.sh | tail -1)
# The collector with the plegd processor (cached; tests/otelcol/run.sh builds the same).
collector=$(bash tests/otelcol/build-collector.sh | tail -1)
"$kubelet" --version
python3 tests/kubelet/oracle_test.py
bench=${PLEGD_KUBELET_BENCH:-}
if [ -z "${PLEGD_E2E_IMAGE:-}" ] && [ -z "$bench" ]; then
  bash scripts/build-image.sh
  PLEGD_E2E_IMAGE=$PWD/target/image/plegd-oci.tar
  # The binary in the image, beside it too.
  plegd=$PWD/target/x86_64-unknown-linux-gnu/release/plegd
elif [ -n "${PLEGD_KUBELET_PLEGD:-}" ]; then
  plegd=$PLEGD_KUBELET_PLEGD
else
  cargo build --release --locked --bin plegd
  plegd=$PWD/target/release/plegd
fi
image=$(awk '$1 == "image:" { print $2; exit }' manifests/daemonset.yaml)

# The kubelet bind-mounts its root dir on itself (mount propagation): unmount what a run
# left under a directory before removing it.
clean() {
  awk -v d="$1" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$1"
}
failed=()
for v in ${PLEGD_KUBELET_VERSIONS:-2.1 1.7}; do
  secs=${PLEGD_KUBELET_SECS:-}
  [ -n "$secs" ] || { [ "$v" = 2.1 ] && secs=300 || secs=150; }
  work="$PWD/target/kubelet-runs/$v"
  clean "$work"; mkdir -p "$work/cni/net.d"
  # The pod network: a bridge on the node, addresses from host-local kept in the run. A
  # /28 (13 addresses for pods, handed out round-robin) for the cases, so the churn reuses
  # an address within the run; a /24 for the benchmark's pods.
  subnet=10.244.78.0/28
  [ -z "$bench" ] || subnet=10.244.78.0/24
  cat >"$work/cni/net.d/10-plegd-test.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "plegd-test", "plugins": [
  {"type": "bridge", "bridge": "plegdkt0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$work/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  metrics=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  if [ -n "$bench" ]; then
    echo "== containerd $v: what plegd costs beside the kubelet at $bench pods"
  else
    echo "== containerd $v: plegd beside the kubelet ($secs s)"
  fi
  endpoint=$(PLEGD_E2E_CNI_CONF_DIR="$work/cni/net.d" PLEGD_E2E_METRICS_ADDR=$metrics "$CTL" start "$v")
  extra=(--seconds "$secs")
  # containerd 1.7 hands each CRI event to one of its stream's subscribers: on a node
  # there is one plegd on it. The one beside the kubelet takes it; the pod relists.
  [ "$v" = 1.7 ] && extra+=(--pod-mode generic)
  if [ -n "$bench" ]; then
    extra=(--bench "$bench")
  else
    "$CTL" import "$v" "$PLEGD_E2E_IMAGE" "$image"
  fi
  set +e
  python3 tests/kubelet/harness.py --kubelet "$kubelet" --plegd "$plegd" --endpoint "$endpoint" \
    --containerd-dir "$(dirname "${endpoint#unix://}")" --ctl "$CTL" --version "$v" --work "$work" "${extra[@]}" \
    --containerd-metrics "$metrics" --collector "$collector" 2>&1 | tee "$work.log"
  rc=${PIPESTATUS[0]}
  set -e
  "$CTL" stop "$v" >/dev/null 2>&1 || true
  ip link del plegdkt0 2>/dev/null || true
  # The kubelet's cgroups, deepest first. A cgroup whose last process is still exiting
  # cannot be removed yet: that is left for the next run, never a failure of this one
  # (under set -e a failing find ended the script before the next version ran).
  for h in /sys/fs/cgroup/*/; do
    if [ -d "$h/plegd-kt-kubelet-$v" ]; then
      find "$h/plegd-kt-kubelet-$v" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
  done
  if [ "$rc" = 0 ]; then
    clean "$work/kubelet"
  else
    failed+=("$v")
    echo "*** containerd $v: the run's files are in $work ***"
  fi
done
[ ${#failed[@]} = 0 ] || { echo "tests/kubelet/run.sh: failed on containerd ${failed[*]}" >&2; exit 1; }
echo "tests/kubelet/run.sh: passed on containerd ${PLEGD_KUBELET_VERSIONS:-2.1 1.7}"
