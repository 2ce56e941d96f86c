#!/usr/bin/env bash
# The chart in CI: lint, every ci/ values file rendered and checked (plegd accepting each
# rendering's flags), the refusals, manifests/ identical to the chart's rendering, and
# `kustomize build manifests/`.
#
#   PLEGD_BIN (default: cargo build's debug binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
tools=$(bash tests/chart/build.sh)
bin=${PLEGD_BIN:-}
if [ -z "$bin" ]; then
  cargo build --locked --bin plegd >&2
  bin=$PWD/target/debug/plegd
fi
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
python3 tests/chart/check.py "$tools/helm" "$bin"

echo "== manifests/ is the chart's rendering (scripts/render-manifests.sh)"
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
HELM="$tools/helm" OUT="$fresh" bash scripts/render-manifests.sh
if ! diff -ru manifests "$fresh"; then
  echo "tests/chart/run.sh: manifests/ differs from the chart's rendering: run scripts/render-manifests.sh and commit" >&2
  exit 1
fi
echo "PASS manifests/ equals the chart's rendering"

echo "== kubectl kustomize manifests/ builds the same objects"
"$tools/kustomize" build manifests >"$fresh/kustomized.yaml"
python3 - "$fresh/kustomized.yaml" <<'PY'
import sys, yaml
built = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
direct = [d for d in yaml.safe_load_all(open("manifests/daemonset.yaml")) if d]
key = lambda d: (d["kind"], d["metadata"]["name"])
if sorted(built, key=key) != sorted(direct, key=key):
    sys.exit("FAIL kustomize build manifests/ differs from manifests/daemonset.yaml")
print(f"PASS kustomize build manifests/: {', '.join(d['kind'] for d in built)}, as manifests/daemonset.yaml")
PY
