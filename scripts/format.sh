#!/usr/bin/env bash
# Formats every C++ file with the repo's .clang-format; --check only reports
# (non-zero exit on any difference; scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(find bench examples fuzz include python/src src tests tools \
  -type f \( -name '*.cc' -o -name '*.h' \) | sort)
if [ "${1:-}" = --check ]; then
  clang-format --dry-run -Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
