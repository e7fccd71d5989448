#!/usr/bin/env bash
# The Debian package (CPack DEB), built from an existing build and inspected:
#   1. `cpack -G DEB` makes shardpoint_<version>_<arch>.deb;
#   2. dpkg-deb -I: name, version, declared Depends (shared libraries of the CLI
#      from dpkg-shlibdeps, plus the -dev packages the headers and archive need);
#   3. dpkg-deb -c: library, headers, CMake package, pkg-config file, CLI, rules;
#   4. `apt-get install -s ./x.deb`: apt resolves those Depends (a simulation:
#      changes nothing, takes no lock);
#   5. dpkg -x into a temporary root; its /usr/bin/shardpoint --version runs.
# SHARDPOINT_TEST_DEB_INSTALL=1 also really installs it with
# `apt-get install ./x.deb`, runs /usr/bin/shardpoint --version and removes it
# again (for a throwaway machine: it changes /usr).
# Usage: tests/install/deb.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: deb.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d /tmp/shardpoint_deb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
version=$(sed -n 's/^project(shardpoint VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
arch=$(dpkg --print-architecture)

echo "-- cpack -G DEB"
(cd "$tmp" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out" >/dev/null)
deb="$tmp/out/shardpoint_${version}_${arch}.deb"
[ -f "$deb" ] || { echo "deb: $deb not made:"; ls "$tmp/out"; exit 1; }
echo "   $(basename "$deb"): $(du -h "$deb" | cut -f1)"

info=$(dpkg-deb -I "$deb")
depends=$(dpkg-deb -f "$deb" Depends)
echo "   Depends: $depends"
[ "$(dpkg-deb -f "$deb" Package)" = shardpoint ] || { echo "$info"; exit 1; }
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || { echo "$info"; exit 1; }
for dep in libc6 libstdc++6 libxxhash-dev libcurl4-openssl-dev libssl-dev; do
  grep -q "\b$dep\b" <<<"$depends" || { echo "deb: Depends lacks $dep"; echo "$info"; exit 1; }
done

contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/shardpoint ./usr/include/shardpoint/checkpoint.h ./usr/lib/libshardpoint.a \
         ./usr/lib/cmake/shardpoint/shardpointConfig.cmake ./usr/lib/pkgconfig/shardpoint.pc \
         ./usr/share/shardpoint/rules/llama.json; do
  grep -q " $f\$" <<<"$contents" || { echo "deb: lacks $f"; echo "$contents"; exit 1; }
done

echo "-- apt-get install -s (dependency resolution only)"
sim=$(apt-get install -s "$deb" 2>&1) || { echo "$sim"; exit 1; }
grep -q "^Inst shardpoint " <<<"$sim" || { echo "$sim"; exit 1; }

echo "-- dpkg -x, shardpoint --version"
dpkg -x "$deb" "$tmp/root"
got=$("$tmp/root/usr/bin/shardpoint" --version)
[ "$got" = "shardpoint $version" ] || { echo "deb CLI: '$got'"; exit 1; }

if [ "${SHARDPOINT_TEST_DEB_INSTALL:-0}" = 1 ]; then
  echo "-- apt-get install ./$(basename "$deb") (SHARDPOINT_TEST_DEB_INSTALL=1)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y "$deb" >/dev/null
  trap 'DEBIAN_FRONTEND=noninteractive apt-get remove -y shardpoint >/dev/null; rm -rf "$tmp"' EXIT
  got=$(/usr/bin/shardpoint --version)
  [ "$got" = "shardpoint $version" ] || { echo "installed CLI: '$got'"; exit 1; }
  pkg-config --modversion shardpoint
fi
echo "Debian package: OK"
