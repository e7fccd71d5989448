#!/usr/bin/env bash
# Set up, build and run every test (README command 2; CI runs this).
#   0. every C++ file formatted with the repo's .clang-format;
#   1. a warnings-as-errors build and the whole suite (ctest);
#   2. the suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
# SHARDPOINT_SKIP_SANITIZE=1 skips step 2 (for quick local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)

echo "== format (clang-format --dry-run; fix: scripts/format.sh)"
bash scripts/format.sh --check

echo "== build (warnings are errors)"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDPOINT_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs"
echo "== tests"
ctest --test-dir build-test --output-on-failure -j"$jobs"

if [ "${SHARDPOINT_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build (AddressSanitizer + UndefinedBehaviorSanitizer)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDPOINT_WERROR=ON \
    -DSHARDPOINT_SANITIZE=ON -DSHARDPOINT_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  echo "== tests under sanitizers"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
fi
