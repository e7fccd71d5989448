#!/usr/bin/env bash
# Set up, build and run the resharding demo (README command 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDPOINT_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target demo shardpoint_cli
./build/demo "${1:-demo_ckpt}"
