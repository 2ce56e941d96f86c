#!/usr/bin/env bash
# Builds plegd as an earlier revision of this repository left it, for tests/upgrade.rs,
# and caches the binary by revision. Prints its path.
#
# The default is ea8fd35, the last revision before plegd wrote a format number into its
# state dir (the journal's schema row, the tombstones' user_version, the OTLP cursor's
# "format"): the one change of on-disk format plegd has had.
#
#   PLEGD_PREVIOUS_REV (default ea8fd35…), PLEGD_PREVIOUS_CACHE (default /var/cache/plegd/previous)
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${PLEGD_PREVIOUS_REV:-ea8fd35b7a8cd8eb64a20cc20f454be74ca1a33f}
cache=${PLEGD_PREVIOUS_CACHE:-/var/cache/plegd/previous}
out="$cache/$rev/plegd"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi
if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
  # A shallow clone (as CI systems make) lacks the history: fetch it.
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    git fetch --quiet --unshallow >&2
  fi
  git cat-file -e "$rev^{commit}" || { echo "tests/upgrade/build-previous.sh: $rev is not in this repository's history" >&2; exit 1; }
fi
src="$cache/$rev/src"
rm -rf "$src"
mkdir -p "$src"
git archive "$rev" | tar -x -C "$src"
# The target directory is shared between revisions and kept: a second revision builds
# only what changed.
(cd "$src" && PLEGD_REVISION="$rev" CARGO_TARGET_DIR="$cache/target" cargo build --locked --bin plegd >&2)
cp "$cache/target/debug/plegd" "$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$src"
"$out" --version >&2
echo "$out"
