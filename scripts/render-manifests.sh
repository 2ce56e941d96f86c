#!/usr/bin/env bash
# Renders manifests/ (for kubectl apply and kustomize users) from charts/plegd with its
# defaults; the monitoring parts with theirs turned on. CI renders again and fails on any
# difference (tests/chart/run.sh), so the chart is the one source of the deployment.
#
#   HELM (default: the one tests/chart/build.sh builds), OUT (default manifests)
set -euo pipefail
cd "$(dirname "$0")/.."
helm=${HELM:-$(bash tests/chart/build.sh)/helm}
out=${OUT:-manifests}
mkdir -p "$out"
render() { # render <template> [--set …]: one template of the release "plegd" in namespace plegd
  local template=$1
  shift
  "$helm" template plegd charts/plegd --namespace plegd --kube-version v1.37.0 --show-only "templates/$template" "$@" |
    grep -v -e '^  *app.kubernetes.io/managed-by: Helm$' -e '^  *helm.sh/chart: ' -e '^# Source: '
}
header() {
  echo "# Rendered from charts/plegd by scripts/render-manifests.sh: edit the chart, not this file."
}
{
  header
  cat <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: plegd
YAML
  render daemonset.yaml
} >"$out/daemonset.yaml"
{ header; render podmonitor.yaml --set podMonitor.enabled=true | sed '/^---$/d'; } >"$out/podmonitor.yaml"
{ header; render prometheusrule.yaml --set prometheusRule.enabled=true | sed '/^---$/d'; } >"$out/prometheusrule.yaml"
cp charts/plegd/dashboards/plegd.json "$out/grafana-dashboard.json"
cat >"$out/kustomization.yaml" <<'YAML'
# Rendered from charts/plegd by scripts/render-manifests.sh: edit the chart, not this file.
# kubectl apply -k manifests/ installs the DaemonSet; with the Prometheus Operator, add
# podmonitor.yaml and prometheusrule.yaml to the resources.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - daemonset.yaml
YAML
