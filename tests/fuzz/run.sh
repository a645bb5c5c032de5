#!/usr/bin/env bash
# Builds the plan fuzz targets (FUZZ_TARGETS, default: the two parsers) with
# clang's libFuzzer (plus Address and
# UndefinedBehavior sanitizers) and runs each for a while on a seed corpus
# made of the bundled examples and the near-64-bit-limit seeds in seeds/.
#
#   tests/fuzz/run.sh [BUILD_DIR] [SECONDS_PER_TARGET]
#   FUZZ_RUNS=N tests/fuzz/run.sh [BUILD_DIR]   (reproducible: seed 1, N inputs each)
#
# Exits non-zero on a build failure or on any finding.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-${TMPDIR:-/tmp}/memo-fuzz}"
seconds="${2:-20}"
cxx="${FUZZ_CXX:-clang++}"
mkdir -p "$build"
for target in ${FUZZ_TARGETS:-trace_fuzz csv_fuzz}; do
  "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I "$root/include" -include "$here/source_location_shim.hpp" "$here/$target.cpp" -o "$build/$target"
  corpus="$build/${target}_corpus"
  mkdir -p "$corpus"
  if [[ $target == trace_fuzz ]]; then
    cp "$root"/examples/traces/*.trace "$here"/seeds/*.trace "$corpus"/
  elif [[ $target == exact_fuzz ]]; then
    : # binary input; starts from an empty corpus
  else
    cp "$root"/examples/traces/*.csv "$here"/seeds/*.csv "$corpus"/
  fi
  echo "fuzzing $target for ${seconds}s"
  # FUZZ_RUNS=N makes the run reproducible: a fixed seed and N inputs
  # instead of a time budget (what the test suite uses, so CI is stable).
  limits=(-max_total_time="$seconds")
  if [[ -n ${FUZZ_RUNS:-} ]]; then limits=(-runs="$FUZZ_RUNS" -seed=1); fi
  (cd "$build" && "./$target" "${limits[@]}" -max_len=4096 -print_final_stats=1 "$corpus" 2>&1 | tail -n 12)
  test "${PIPESTATUS[0]}" -eq 0
done
echo "fuzzing finished without findings"
