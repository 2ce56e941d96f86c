#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 30) on its seed corpus (fuzz/corpus/<target>,
# read only: what the fuzzer finds goes to a scratch directory) and prints each target's
# executions and coverage. A crash fails the run and leaves its input in
# fuzz/artifacts/<target>/; make it a regression test (docs/testing.md, "Fuzzing").
# Needs cargo-fuzz; nightly Rust if installed, else the stable toolchain with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz passes nightly-only flags). Extra arguments: target names.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${SECONDS_PER_TARGET:-${1:-30}}
[ $# -gt 0 ] && shift
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <("${fuzz[@]}" list)
"${fuzz[@]}" build -s none
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  log="$scratch/$t.log"
  if "${fuzz[@]}" run -s none "$t" "$scratch/$t" "corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
    tail -40 "$log"
  fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo '?')
  echo "fuzz: $t $status: $execs executions in ${seconds}s, coverage $cov"
done
exit $failed
