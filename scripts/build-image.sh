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

# The revision the binary names (`plegd --version`, `plegd_build_info`) is the image's label.
revision=${PLEGD_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
version=$(awk -F'"' '$1 == "version = " { print $2; exit }' Cargo.toml)
PLEGD_REVISION=$revision RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --locked --bin plegd --target "$target"
mkdir -p "$work/context"
strip -o "$work/context/plegd" "target/$target/release/plegd"
# The crates in the binary, as a CycloneDX SBOM (dev-dependencies left out).
command -v cargo-cyclonedx >/dev/null || cargo install --locked cargo-cyclonedx@0.5.9
cargo cyclonedx --format json --describe binaries --target "$target" -q
mv plegd_bin.cdx.json "$work/context/plegd.cdx.json"
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
  --omit-history -f Containerfile -t "$name" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.source=https://github.com/plegd/plegd" \
  "$work/context" >/dev/null
rm -f "$out"
"${b[@]}" push --quiet "$name" "oci-archive:$out:$name"
# The manifest's digest, as containerd will know the image.
index=$(tar -xOf "$out" index.json)
digest_re='"digest":"([^"]*)"'
[[ $index =~ $digest_re ]] || { echo "build-image.sh: no digest in $out's index.json: $index" >&2; exit 1; }
digest=${BASH_REMATCH[1]}
# The labels as the archive's image config holds them, checked against the binary.
manifest=$(tar -xOf "$out" "blobs/sha256/${digest#sha256:}")
config_re='"config":[^}]*"digest":"sha256:([0-9a-f]*)"'
[[ $manifest =~ $config_re ]] || { echo "build-image.sh: no config in the manifest: $manifest" >&2; exit 1; }
config=$(tar -xOf "$out" "blobs/sha256/${BASH_REMATCH[1]}")
for label in "org.opencontainers.image.version\":\"$version" "org.opencontainers.image.revision\":\"$revision"; do
  [[ $config == *"\"$label\""* ]] || { echo "build-image.sh: the image lacks the label $label" >&2; exit 1; }
done
# The SBOM is in the image, and it is this build's.
sbom_found=
for layer in $(grep -o '"digest":"sha256:[0-9a-f]*"' <<<"$manifest" | cut -d: -f3 | tr -d '"'); do
  if tar -xOf "$out" "blobs/sha256/$layer" 2>/dev/null | tar -tzf - 2>/dev/null | grep -qx 'usr/share/sbom/plegd.cdx.json'; then
    sbom_found=1
  fi
done
[ -n "$sbom_found" ] || { echo "build-image.sh: no /usr/share/sbom/plegd.cdx.json in the image" >&2; exit 1; }
grep -q "\"version\": *\"$version\"" "$work/context/plegd.cdx.json" ||
  { echo "build-image.sh: the SBOM does not name plegd $version" >&2; exit 1; }
said=$("$work/context/plegd" --version)
[ "$said" = "plegd $version ($revision)" ] || { echo "build-image.sh: the binary says '$said', the labels $version $revision" >&2; exit 1; }
echo "image $name"
echo "labels version $version revision $revision"
echo "sbom /usr/share/sbom/plegd.cdx.json ($(grep -o '"bom-ref"' "$work/context/plegd.cdx.json" | wc -l) entries)"
echo "digest $digest"
echo "archive $out ($(du -h "$out" | cut -f1))"
