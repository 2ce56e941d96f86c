#!/usr/bin/env bash
# Upgrades and downgrades between this build and an earlier revision of the repository,
# one watcher resuming through every turn (tests/upgrade.rs).
#
#   PLEGD_PREVIOUS_REV: the revision to build (tests/upgrade/build-previous.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
previous=$(bash tests/upgrade/build-previous.sh | tail -1)
echo "previous: $("$previous" --version)"
PLEGD_PREVIOUS_BIN="$previous" cargo test --locked --test upgrade -- --ignored --nocapture
