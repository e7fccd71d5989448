#!/usr/bin/env bash
# Packs, into .devdeps/ (git-ignored through .git/info/exclude), the build
# dependencies that this project's GPU machines lack and that tests/gpu/run.sh
# builds shardpoint with there: the headers and CMake packages of
# nlohmann-json and CLI11, xxhash's header and static library (all from this
# machine's Debian packages, scripts/setup.sh), and CPython 3.12's headers
# (the GPU machines' interpreter is 3.12; used only where it has none).
# Run here, then hand .devdeps to the device run as a carried path.
set -euo pipefail
cd "$(dirname "$0")/../.."
d=.devdeps
rm -rf "$d"
mkdir -p "$d/include" "$d/lib" "$d/share/cmake"
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/xxhash.h /usr/include/xxh3.h "$d/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$d/share/cmake/"
cp /usr/lib/x86_64-linux-gnu/libxxhash.a "$d/lib/"
py312=$(ls -d /root/.pyenv/versions/3.12*/include/python3.12 2>/dev/null | head -1 || true)
if [ -n "$py312" ]; then cp -r "$py312" "$d/python3.12"; fi
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
du -sh "$d"
