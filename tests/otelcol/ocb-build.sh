#!/usr/bin/env bash
# Builds a collector with ocb from the builder manifest in docs/collector-processor.md,
# exactly as written there (only /path/to/plegd is replaced by this checkout), and checks
# that it lists the plegd processor: what a collector user does, end to end.
#
#   bash tests/otelcol/ocb-build.sh
#
# Needs go; installs ocb (go.opentelemetry.io/collector/cmd/builder, the version the
# manifest's comment names) into target/ocb/bin. The build is cached: redone only when
# the manifest, the processor's or the Go client's sources, or the Go version changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=target/ocb
mkdir -p "$work/bin"
doc=docs/collector-processor.md
# The first yaml block under "## Build it into a collector".
manifest=$(awk '/^## Build it into a collector/ { on = 1 } on && /^```yaml/ { grab = 1; next } grab && /^```/ { exit } grab { print }' "$doc")
[ -n "$manifest" ] || { echo "*** no builder manifest in $doc ***" >&2; exit 1; }
version=$(sed -n 's/.*cmd\/builder@\(v[0-9.]*\).*/\1/p' <<<"$manifest" | head -1)
[ -n "$version" ] || { echo "*** the manifest's comment names no ocb version ***" >&2; exit 1; }
printf '%s\n' "${manifest//\/path\/to\/plegd/$root}" >"$work/builder-config.yaml"

stamp=$({ cat "$work/builder-config.yaml"; go version;
  find clients/otelcol clients/go \( -name '*.go' -not -name '*_test.go' -o -name go.mod -o -name go.sum \) -print0 |
    sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
binary="$work/otelcol-plegd/otelcol-plegd"
if [ -x "$binary" ] && [ "$(cat "$work/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "ocb: cached $binary"
else
  GOBIN="$root/$work/bin" go install "go.opentelemetry.io/collector/cmd/builder@$version"
  (cd "$work" && "$root/$work/bin/builder" --config builder-config.yaml)
  echo "$stamp" >"$work/stamp"
fi
components=$("$binary" components)
grep -Eq 'name: plegd$' <<<"$components" ||
  { echo "*** the ocb-built collector does not list the plegd processor:" >&2; echo "$components" >&2; exit 1; }
echo "ocb $version built $binary from $doc's manifest; it lists the plegd processor"
