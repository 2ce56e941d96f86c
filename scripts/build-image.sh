#!/usr/bin/env bash
# Builds plegd's image offline: a static binary built here, put by buildah into the
# `image` stage of the repository's Containerfile (the same layout as a registry build),
# written as an OCI archive that `ctr images import` and `podman load` read.
#
#   bash scripts/build-image.sh [OUT]     default OUT: target/image/plegd-oci.tar
#
# The image is named as manifests/daemonset.yaml names it, so the pod the manifest
# describes runs this build. Needs root and buildah (installed with apt when missing).
# The image's timestamps are fixed (--timestamp 0): the same binary gives the same
# image digest, which the script prints.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/image/plegd-oci.tar}
work=target/image
target=x86_64-unknown-linux-gnu
[ "$(id -u)" = 0 ] || { echo "build-image.sh: buildah needs root here" >&2; exit 1; }
if ! command -v buildah >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah >/dev/null
fi
name=$(awk '$1 == "image:" { print $2; exit }' manifests/daemonset.yaml)
[ -n "$name" ] || { echo "build-image.sh: no image: in manifests/daemonset.yaml" >&2; exit 1; }

RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --bin plegd --target "$target"
mkdir -p "$work/context"
strip -o "$work/context/plegd" "target/$target/release/plegd"
# A static binary has no interpreter; a dynamic one would not start in an empty image.
# (Read whole, then searched: under pipefail `readelf | grep -q` can fail by SIGPIPE.)
headers=$(readelf -l "$work/context/plegd")
if grep -q INTERP <<<"$headers"; then
  echo "build-image.sh: the binary is not static (it names an ELF interpreter)" >&2
  exit 1
fi

b=(buildah --root "$PWD/$work/storage" --runroot "$PWD/$work/run" --storage-driver vfs)
"${b[@]}" rmi -f "$name" >/dev/null 2>&1 || true
"${b[@]}" bud --quiet --target image --build-context "build=$work/context" --timestamp 0 \
  --omit-history -f Containerfile -t "$name" "$work/context" >/dev/null
rm -f "$out"
"${b[@]}" push --quiet "$name" "oci-archive:$out:$name"
# The manifest's digest, as containerd will know the image.
index=$(tar -xOf "$out" index.json)
digest_re='"digest":"([^"]*)"'
[[ $index =~ $digest_re ]] || { echo "build-image.sh: no digest in $out's index.json: $index" >&2; exit 1; }
digest=${BASH_REMATCH[1]}
echo "image $name"
echo "digest $digest"
echo "archive $out ($(du -h "$out" | cut -f1))"
