#!/usr/bin/env bash
# Real containerd for plegd's end-to-end suite: installs containerd 1.6 (Debian 12),
# 1.7 (Debian 13's package) and 2.1 (Debian sid's package), the last two unpacked
# privately, builds a busybox OCI image, and starts or stops a private containerd with
# its own root, state and socket.
#
#   containerd.sh install              apt packages + containerd 1.7 and 2.1 under $E2E
#   containerd.sh start 1.6|1.7|2.1    prints the CRI endpoint (unix://…)
#   containerd.sh stop V               kills containers, shims and containerd; cleans up
#   containerd.sh kill V               kills containerd only (containers keep running)
#   containerd.sh resume V             starts containerd again on the same root and socket
#   containerd.sh import V FILE NAME   imports an OCI archive (scripts/build-image.sh) as NAME
#   containerd.sh ctr V ARGS...        runs ctr against containerd V (namespace k8s.io)
#   containerd.sh nri-socket V         prints the path of its NRI socket (1.7, 2.1)
#
# PLEGD_E2E_INSTANCE runs a second containerd of a version beside the first;
# PLEGD_E2E_CNI_CONF_DIR and PLEGD_E2E_METRICS_ADDR, at start, give it a CNI
# configuration directory and a metrics listener with each gRPC call's time
# (tests/kubelet uses all three; tests/e2e/run.sh the metrics).
set -euo pipefail

E2E=${PLEGD_E2E_ROOT:-/var/tmp/plegd-e2e}
SANDBOX_IMAGE=registry.k8s.io/pause:3.6
WORKLOAD_IMAGE=docker.io/library/busybox:latest

die() { echo "containerd.sh: $*" >&2; exit 1; }

bin_dir() {
  case "$1" in
    1.6) echo /usr/bin ;;
    1.7) echo "$E2E/1.7/usr/bin" ;;
    2.1) echo "$E2E/2.1/usr/bin" ;;
    *) die "unknown version $1 (use 1.6, 1.7 or 2.1)" ;;
  esac
}

# PLEGD_E2E_INSTANCE names a second private containerd of the same version (its own root,
# state and socket), for suites that must not see each other's pods.
run_dir() { echo "$E2E/run${PLEGD_E2E_INSTANCE:+-$PLEGD_E2E_INSTANCE}-$1"; }

install() {
  export DEBIAN_FRONTEND=noninteractive
  if ! command -v runc >/dev/null || ! [ -x /usr/bin/containerd ] || ! [ -x /bin/busybox ]; then
    apt-get update -qq
    apt-get install -y -qq containerd runc busybox-static >/dev/null
  fi
  # containerd 1.7 comes from Debian 13, 2.1 from sid; apt is pointed at each through
  # private lists so nothing system-wide changes. sid's runc needs a newer glibc:
  # containerd 2.1 runs with Debian 12's runc.
  private_containerd 1.7 trixie
  private_containerd 2.1 sid
}

# private_containerd VERSION SUITE: downloads SUITE's containerd package and unpacks it
# under $E2E/VERSION.
private_containerd() {
  local v=$1 suite=$2 apt uri
  [ -x "$E2E/$v/usr/bin/containerd" ] && return 0
  apt="$E2E/apt-$suite"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc" "$apt/dl" "$E2E/$v"
  uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
  [ -n "$uri" ] || die "no Debian mirror configured in /etc/apt"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $suite main" >"$apt/etc/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  (cd "$apt/dl" && rm -f containerd_*.deb && apt-get "${opts[@]}" download containerd >/dev/null)
  dpkg-deb -x "$apt"/dl/containerd_*.deb "$E2E/$v"
  # Captured, then matched: `cmd | grep -q` under pipefail fails when grep exits before
  # cmd has written all it has (SIGPIPE, 141).
  local said
  said=$("$E2E/$v/usr/bin/containerd" --version)
  grep -q " v\?${v//./\\.}\." <<<"$said" || die "unpacked containerd is not $v: $said"
}

image() {
  local out="$E2E/busybox-oci.tar"
  [ -s "$out" ] && return
  mkdir -p "$E2E"
  python3 - "$out" "$SANDBOX_IMAGE" "$WORKLOAD_IMAGE" <<'PY'
import hashlib, io, json, sys, tarfile, time
out, names = sys.argv[1], sys.argv[2:]
def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data
# One layer: /bin/busybox and the applets the tests use.
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    for d in ("bin", "tmp", "proc", "dev", "sys", "etc"):
        i = tarfile.TarInfo(d); i.type = tarfile.DIRTYPE; i.mode = 0o755; t.addfile(i)
    data = open("/bin/busybox", "rb").read()
    i = tarfile.TarInfo("bin/busybox"); i.size = len(data); i.mode = 0o755
    t.addfile(i, io.BytesIO(data))
    for applet in ("sh", "sleep", "true", "false", "echo", "cat", "kill"):
        i = tarfile.TarInfo("bin/" + applet); i.type = tarfile.SYMTYPE; i.linkname = "busybox"; t.addfile(i)
layer_digest, layer_data = blob(layer.getvalue())
config = {
    "architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/bin"], "Cmd": ["sleep", "2147483647"], "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
}
config_digest, config_data = blob(json.dumps(config).encode())
manifest = {
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config_data)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": len(layer_data)}],
}
manifest_digest, manifest_data = blob(json.dumps(manifest).encode())
# The workload also by digest, as a pulled image has it: the runtime's image_ref is
# then the repository digest (`repo@sha256:…`), not the bare image id.
names = names + [names[-1].rsplit(":", 1)[0] + "@" + manifest_digest]
index = {"schemaVersion": 2, "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": len(manifest_data),
     "platform": {"architecture": "amd64", "os": "linux"},
     "annotations": {"io.containerd.image.name": n, "org.opencontainers.image.ref.name": n.rsplit(":", 1)[1]}}
    for n in names]}
with tarfile.open(out, "w") as t:
    def add(name, data):
        i = tarfile.TarInfo(name); i.size = len(data); i.mode = 0o644; i.mtime = int(time.time())
        t.addfile(i, io.BytesIO(data))
    add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    add("index.json", json.dumps(index).encode())
    for d, data in ((layer_digest, layer_data), (config_digest, config_data), (manifest_digest, manifest_data)):
        add("blobs/sha256/" + d.split(":")[1], data)
PY
}

launch() {
  local v=$1 dir bin
  dir=$(run_dir "$v"); bin=$(bin_dir "$v")
  [ -x "$bin/containerd" ] || die "containerd $v is not installed (run: $0 install)"
  PATH="$bin:$PATH" nohup "$bin/containerd" --config "$dir/config.toml" --root "$dir/root" --state "$dir/state" \
    --address "$dir/containerd.sock" --log-level warn >>"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  for _ in $(seq 1 200); do
    if PATH="$bin:$PATH" ctr --address "$dir/containerd.sock" version >/dev/null 2>&1; then return 0; fi
    kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null || { tail -20 "$dir/containerd.log" >&2; die "containerd $v exited at start"; }
    sleep 0.1
  done
  tail -20 "$dir/containerd.log" >&2
  die "containerd $v did not answer within 20s"
}

start() {
  local v=$1 dir bin
  dir=$(run_dir "$v"); bin=$(bin_dir "$v")
  stop "$v" >/dev/null 2>&1 || true
  image
  mkdir -p "$dir/root" "$dir/state"
  PATH="$bin:$PATH" "$bin/containerd" config default >"$dir/config.toml"
  python3 - "$dir/config.toml" "$SANDBOX_IMAGE" "$v" "${PLEGD_E2E_CNI_CONF_DIR:-}" "${PLEGD_E2E_METRICS_ADDR:-}" "$dir/nri.sock" <<'PY'
import re, sys
path, sandbox, version, cni_conf_dir, metrics, nri_socket = sys.argv[1:7]
s = open(path).read()
# NRI on its own socket (never the node's /var/run/nri), on in 1.7 too (off by default
# there); 1.6 has no NRI. Its section is the only one with a socket_path.
def nri(m):
    section = re.sub(r"socket_path = ['\"][^'\"]*['\"]", f"socket_path = '{nri_socket}'", m.group(0))
    return re.sub(r"disable = true", "disable = false", section)
s = re.sub(r"\[plugins\.['\"]io\.containerd\.nri\.v1\.nri['\"]\][^\[]*", nri, s)
# A pod network from the test's own CNI configuration (PLEGD_E2E_CNI_CONF_DIR), and
# containerd's own gRPC metrics on PLEGD_E2E_METRICS_ADDR (host:port), when asked.
if cni_conf_dir:
    s = re.sub(r"conf_dir = ['\"]/etc/cni/net.d['\"]", f"conf_dir = '{cni_conf_dir}'", s)
if metrics:
    s = re.sub(r"(\[metrics\]\s*\n\s*address = )['\"]['\"]", lambda m: f"{m.group(1)}'{metrics}'", s)
    # Each call's time on containerd's own clock (grpc_server_handling_seconds).
    s = re.sub(r"grpc_histogram = false", "grpc_histogram = true", s)
# Version 2 configs (1.6, 1.7) quote with ", version 3 (2.x) with '.
s = re.sub(r"restrict_oom_score_adj = false", "restrict_oom_score_adj = true", s)
s = re.sub(r"disable_apparmor = false", "disable_apparmor = true", s)
s = re.sub(r'sandbox_image = ".*"', f'sandbox_image = "{sandbox}"', s)
s = re.sub(r"sandbox = '.*'", f"sandbox = '{sandbox}'", s)
if not version.startswith("2."):
    # 1.x: the native snapshotter always works. 2.1 cannot import into it ("no unpack
    # platforms defined") and keeps overlayfs.
    s = re.sub(r'snapshotter = "overlayfs"', 'snapshotter = "native"', s)
open(path, "w").write(s)
PY
  launch "$v"
  local snap=(--snapshotter native)
  [ "${v%%.*}" = 2 ] && snap=()
  PATH="$bin:$PATH" ctr --address "$dir/containerd.sock" -n k8s.io images import "${snap[@]}" \
    "$E2E/busybox-oci.tar" >/dev/null
  echo "unix://$dir/containerd.sock"
}

kill_daemon() {
  local dir pid
  dir=$(run_dir "$1")
  [ -f "$dir/containerd.pid" ] || return 0
  pid=$(cat "$dir/containerd.pid")
  kill -9 "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$dir/containerd.pid"
}

stop() {
  local v=$1 dir bin
  dir=$(run_dir "$v"); bin=$(bin_dir "$v")
  [ -d "$dir" ] || return 0
  if [ -S "$dir/containerd.sock" ] && [ -f "$dir/containerd.pid" ]; then
    for t in $(PATH="$bin:$PATH" ctr --address "$dir/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      PATH="$bin:$PATH" ctr --address "$dir/containerd.sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
  fi
  kill_daemon "$v"
  pkill -9 -f "containerd-shim-runc-v2.*$dir" 2>/dev/null || true
  awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$dir"
}

# import_image V FILE NAME: an OCI archive into k8s.io, named NAME (as a kubelet would
# find it after a pull).
import_image() {
  local v=$1 file=$2 name=$3 dir bin snap=(--snapshotter native)
  dir=$(run_dir "$v"); bin=$(bin_dir "$v")
  [ -s "$file" ] || die "no image archive at $file (run scripts/build-image.sh)"
  [ "${v%%.*}" = 2 ] && snap=()
  local ctr=(ctr --address "$dir/containerd.sock" -n k8s.io)
  PATH="$bin:$PATH" "${ctr[@]}" images import "${snap[@]}" --base-name "${name%:*}" "$file" >/dev/null
  # The list is read whole before it is searched: ctr writes a line per write(2), and
  # `ctr … | grep -q` under pipefail failed (SIGPIPE, 141) when grep found the name and
  # exited before ctr's next line — 12 of 300 times on a loaded machine, and once in CI.
  local names
  names=$(PATH="$bin:$PATH" "${ctr[@]}" images ls -q)
  grep -qxF "$name" <<<"$names" || die "imported $file, but no image is named $name: $(tr '\n' ' ' <<<"$names")"
}

case "${1:-}" in
  install) install ;;
  image) image ;;
  start) start "${2:?version}" ;;
  stop) stop "${2:?version}" ;;
  kill) kill_daemon "${2:?version}" ;;
  resume) launch "${2:?version}"; echo "unix://$(run_dir "$2")/containerd.sock" ;;
  nri-socket) echo "$(run_dir "${2:?version}")/nri.sock" ;;
  import) import_image "${2:?version}" "${3:?archive}" "${4:?image name}" ;;
  ctr) v=${2:?version}; shift 2; PATH="$(bin_dir "$v"):$PATH" ctr --address "$(run_dir "$v")/containerd.sock" -n k8s.io "$@" ;;
  *) die "usage: $0 install|image|start V|stop V|kill V|resume V|import V FILE NAME" ;;
esac
