#!/usr/bin/env bash
# Builds helm and kustomize from their Go modules and caches the binaries, for the chart
# checks (tests/chart/run.sh). Prints the directory holding both.
#
#   HELM_VERSION (default v3.22.0), KUSTOMIZE_VERSION (default v5.7.1),
#   PLEGD_TOOLS_CACHE (default /var/cache/plegd/tools)
set -euo pipefail
helm_version=${HELM_VERSION:-v3.22.0}
kustomize_version=${KUSTOMIZE_VERSION:-v5.7.1}
dir=${PLEGD_TOOLS_CACHE:-/var/cache/plegd/tools}/helm-$helm_version-kustomize-$kustomize_version
if [ -x "$dir/helm" ] && [ -x "$dir/kustomize" ]; then
  echo "$dir"
  exit 0
fi
command -v go >/dev/null || { echo "tests/chart/build.sh: needs Go to build helm and kustomize" >&2; exit 1; }
mkdir -p "$dir"
GOBIN="$dir" go install "helm.sh/helm/v3/cmd/helm@$helm_version" >&2
GOBIN="$dir" go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version" >&2
"$dir/helm" version --short >&2
"$dir/kustomize" version >&2
echo "$dir"
