#!/usr/bin/env bash
# The Python package, installed as a user would and tested as installed:
#   1. `python3 -m build --no-isolation --wheel`: a wheel holding the module,
#      the pure-Python files, the bundled CLI and the `shardpoint` entry point;
#      `--sdist`: a source archive holding what CMake needs;
#   2. a fresh venv (--system-site-packages: Debian's numpy, torch, mpi4py);
#      `pip install --no-index --no-build-isolation .` into it (offline);
#   3. from a directory where the source tree's python/shardpoint is not
#      importable: the package imports from the venv, `shardpoint --version`
#      runs, and the whole pytest suite runs against the installed package
#      (with the tests' own module _shardpoint_testing, built beside it).
# Both builds share one CMake build directory (SHARDPOINT_CMAKE_BUILD_DIR,
# default build-pip/), so the second one compiles nothing. Extra CMake
# arguments: SHARDPOINT_CMAKE_ARGS (e.g. the flags of build-test/ for ccache hits).
# Usage: tests/install/pip.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${SHARDPOINT_PIP_WORK:-$repo/build-pip}
mkdir -p "$work"
export SHARDPOINT_CMAKE_BUILD_DIR=${SHARDPOINT_CMAKE_BUILD_DIR:-$work}
tmp=$(mktemp -d /tmp/shardpoint_pip.XXXXXX)
chmod 755 "$tmp"  # a test runs the package as user nobody
trap 'rm -rf "$tmp"' EXIT
version=$(sed -n 's/^project(shardpoint VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")

start=$(date +%s)
echo "-- python3 -m build --no-isolation --wheel"
rm -rf "$work/dist"
(cd "$repo" && /usr/bin/python3 -m build --no-isolation --wheel --outdir "$work/dist" . \
  >"$work/build.log" 2>&1) || { tail -40 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/shardpoint-"$version"-*.whl)
/usr/bin/python3 - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["shardpoint/__init__.py", "shardpoint/_cli.py", "shardpoint/_bin/shardpoint",
        "shardpoint/py.typed", "shardpoint/_shardpoint.pyi"]
missing = [n for n in need if n not in names]
missing += [] if any(n.startswith("shardpoint/_shardpoint") and n.endswith(".so") for n in names) \
    else ["shardpoint/_shardpoint*.so"]
missing += [f"no test code, but it has {n}" for n in names if "_shardpoint_testing" in n]
ep = [n for n in names if n.endswith("entry_points.txt")]
if missing or not ep:
    sys.exit(f"wheel lacks {missing or 'entry_points.txt'}: {names}")
if "shardpoint = shardpoint._cli:main" not in zipfile.ZipFile(sys.argv[1]).read(ep[0]).decode():
    sys.exit("wheel: no `shardpoint` console script")
print(f"   {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files")
PY
echo "   wheel: $(( $(date +%s) - start )) s"
# The sdist (no compile): everything CMake needs to build the wheel from it.
(cd "$repo" && /usr/bin/python3 -m build --no-isolation --sdist --outdir "$work/dist" . \
  >"$work/sdist.log" 2>&1) || { tail -40 "$work/sdist.log"; exit 1; }
/usr/bin/python3 - "$work/dist/shardpoint-$version.tar.gz" <<'PY'
import sys, tarfile
names = {n.split("/", 1)[1] for n in tarfile.open(sys.argv[1]).getnames() if "/" in n}
need = ["CMakeLists.txt", "setup.py", "pyproject.toml", "cmake/install.cmake",
        "include/shardpoint/checkpoint.h", "src/checkpoint/save.cc", "python/CMakeLists.txt",
        "python/src/module.cc", "python/shardpoint/__init__.py", "tools/shardpoint.cc",
        "rules/llama.json"]
missing = [n for n in need if n not in names]
if missing:
    sys.exit(f"sdist lacks {missing}")
print(f"   {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} entries")
PY

echo "-- venv + pip install --no-index --no-build-isolation ."
venv=$tmp/venv
/usr/bin/python3 -m venv --system-site-packages "$venv"
(cd "$repo" && "$venv/bin/pip" install -q --no-index --no-build-isolation . \
  >"$work/pip.log" 2>&1) || { tail -40 "$work/pip.log"; exit 1; }

cd "$tmp"  # not the repository: python/shardpoint must not be importable from here
where=$("$venv/bin/python" -c "import shardpoint, sys; print(shardpoint.__file__)")
case "$where" in
  "$venv"/*) echo "   imports $where" ;;
  *) echo "pip: shardpoint imported from $where, not from the venv"; exit 1 ;;
esac
got=$("$venv/bin/shardpoint" --version)
[ "$got" = "shardpoint $version" ] || { echo "venv CLI: '$got'"; exit 1; }
pyver=$("$venv/bin/python" -c "import shardpoint; print(shardpoint.__version__)")
[ "$pyver" = "$version" ] || { echo "shardpoint.__version__ $pyver != CMake's $version"; exit 1; }
echo "   wheel + install: $(( $(date +%s) - start )) s"

# The tests' test-only module (_shardpoint_testing: the Comm conformance suite
# on the Python adapters), never in the wheel: built in the same CMake build
# directory as the installed module, from the same libshardpoint.a (one
# source file to compile), and found through SHARDPOINT_TESTING_DIR.
echo "-- the tests' module _shardpoint_testing (not in the package)"
cmake -S "$repo" -B "$SHARDPOINT_CMAKE_BUILD_DIR" -DSHARDPOINT_PYTHON_TESTING=ON \
  >"$work/testing.log" 2>&1 &&
  cmake --build "$SHARDPOINT_CMAKE_BUILD_DIR" -j"$(nproc)" --target _shardpoint_testing \
  >>"$work/testing.log" 2>&1 || { tail -40 "$work/testing.log"; exit 1; }

echo "-- pytest against the installed package"
SHARDPOINT_TEST_INSTALLED="$venv" OMPI_MCA_btl_vader_single_copy_mechanism=none \
SHARDPOINT_TESTING_DIR="$SHARDPOINT_CMAKE_BUILD_DIR/python_testing" \
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests"
echo "Python package: OK ($(( $(date +%s) - start )) s)"
