#!/usr/bin/env bash
# Install paths of the C++ library, end to end (scripts/test.sh runs this):
#   1. `cmake --install BUILD --prefix TMP` from an existing build (no rebuild);
#      the files land where the README says, and no internal header does;
#   2. a consumer project found through find_package(shardpoint) builds and runs;
#   3. the same program built with `pkg-config --cflags --libs shardpoint`;
#   4. a consumer that add_subdirectory()s the source tree builds the library
#      without tests/benchmarks/CLI/Python (they default to off there) and runs.
# Usage: tests/install/run.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d /tmp/shardpoint_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
version=$(sed -n 's/^project(shardpoint VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")

echo "-- cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/shardpoint include/shardpoint/checkpoint.h include/shardpoint/comm.h \
         lib/libshardpoint.a lib/cmake/shardpoint/shardpointConfig.cmake \
         lib/cmake/shardpoint/shardpointConfigVersion.cmake \
         lib/cmake/shardpoint/shardpointTargets.cmake lib/pkgconfig/shardpoint.pc \
         share/shardpoint/rules/llama.json share/shardpoint/rules/qwen_moe.json \
         share/shardpoint/rules/megatron_llama.json; do
  [ -e "$prefix/$f" ] || { echo "install: missing $f"; exit 1; }
done
if find "$prefix" -path '*/src/*' | grep -q .; then
  echo "install: internal files installed:"; find "$prefix" -path '*/src/*'; exit 1
fi
# Private dependencies must not leak into the exported interface.
if grep -q 'nlohmann' "$prefix"/lib/cmake/shardpoint/*.cmake "$prefix/lib/pkgconfig/shardpoint.pc"; then
  echo "install: nlohmann_json leaks into the installed interface"; exit 1
fi
got=$("$prefix/bin/shardpoint" --version)
[ "$got" = "shardpoint $version" ] || { echo "installed CLI: '$got', want 'shardpoint $version'"; exit 1; }

echo "-- find_package(shardpoint) consumer"
cmake -S "$repo/tests/install/find_package" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/fp" >/dev/null
"$tmp/fp/consumer" "$tmp/ckpt_fp"
"$prefix/bin/shardpoint" verify "$tmp/ckpt_fp"

echo "-- pkg-config consumer"
# shellcheck disable=SC2046
g++ -O1 -o "$tmp/pc_consumer" "$repo/tests/install/consumer.cc" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs shardpoint)
"$tmp/pc_consumer" "$tmp/ckpt_pc"

echo "-- add_subdirectory consumer (builds the library from source, -O0)"
cmake -S "$repo/tests/install/add_subdirectory" -B "$tmp/sub" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DSHARDPOINT_SOURCE_DIR="$repo" ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
cmake --build "$tmp/sub" -j"$(nproc)" --target consumer >/dev/null
"$tmp/sub/consumer" "$tmp/ckpt_sub"
echo "install paths: OK"
