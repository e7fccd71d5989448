#!/usr/bin/env bash
# Set up, build and run every test (README command 2; CI runs this).
#   0. every C++ file formatted with the repo's .clang-format;
#   1. a warnings-as-errors build and the whole suite (ctest);
#      the install paths: cmake --install + find_package/pkg-config/add_subdirectory
#      consumers, the .deb (CPack), pip into a venv + the pytest suite against it;
#   2. the suite again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the library and its mpirun tests built against MPICH instead of Open MPI;
#   4. the threaded tests under ThreadSanitizer (their own small binary).
# SHARDPOINT_SKIP_SANITIZE=1 skips step 2, SHARDPOINT_SKIP_MPICH=1 step 3,
# SHARDPOINT_SKIP_TSAN=1 step 4 (for quick local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
# Each stage prints how long the previous one took, and the total at the end.
t_start=$SECONDS; t_stage=$SECONDS
stage() {
  echo "== $* [previous stage $((SECONDS - t_stage)) s, total $((SECONDS - t_start)) s]"
  t_stage=$SECONDS
}
# The sanitizer builds compile at -O1 with line tables only: under ASan that
# compiles ~2.5x faster than -O2 -g (load.cc: 24 s vs 66 s) and still gives
# symbolized stacks with file:line.
light_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# Every build goes through ccache, keyed relative to this checkout, so builds
# with the main build's flags (the pip package's, MPICH's) compile only what
# differs: the Python module's link flags, the files that include mpi.h.
main_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDPOINT_WERROR=ON)
if command -v ccache >/dev/null && [ "${SHARDPOINT_NO_CCACHE:-0}" != 1 ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
fi

stage "format (clang-format --dry-run; fix: scripts/format.sh)"
bash scripts/format.sh --check

stage "build (warnings are errors)"
cmake -S . -B build-test "${main_flags[@]}" >/dev/null
cmake --build build-test -j"$jobs"
stage "tests (the Python suite runs below, against the pip-installed package)"
ctest --test-dir build-test --output-on-failure -j"$jobs" -E '^python_tests$'

stage "install: cmake --install, then find_package / pkg-config / add_subdirectory consumers"
bash tests/install/run.sh build-test
stage "Debian package (CPack DEB)"
bash tests/install/deb.sh build-test
stage "Python package: pip install into a fresh venv, pytest against the installed package"
# libstdc++ linked into the module statically, as portable-wheel toolchains
# (and the GPU machine's compiler) do: the suite, torch loaded, runs against it.
# Built with build-test's flags, so ccache serves every object it compiled.
SHARDPOINT_CMAKE_ARGS="${main_flags[*]} -DCMAKE_MODULE_LINKER_FLAGS=-static-libstdc++ ${SHARDPOINT_CMAKE_ARGS:-}" \
  bash tests/install/pip.sh

if [ "${SHARDPOINT_SKIP_SANITIZE:-0}" != 1 ]; then
  stage "build (AddressSanitizer + UndefinedBehaviorSanitizer)"
  cmake -S . -B build-asan "${light_flags[@]}" -DSHARDPOINT_WERROR=ON \
    -DSHARDPOINT_SANITIZE=ON -DSHARDPOINT_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  stage "tests under sanitizers"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
fi

if [ "${SHARDPOINT_SKIP_MPICH:-0}" != 1 ]; then
  stage "build against MPICH (library + mpirun tests)"
  # build-test's flags: only the files that include mpi.h miss the cache.
  cmake -S . -B build-mpich "${main_flags[@]}" -DSHARDPOINT_BENCH=OFF -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
    -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >/dev/null
  mpi_checks=$(cd tests/mpi && ls *_check.cc | sed 's/\.cc$//')
  # shellcheck disable=SC2086
  cmake --build build-mpich -j"$jobs" --target $mpi_checks
  stage "mpirun tests (MPICH)"
  ctest --test-dir build-mpich --output-on-failure -j"$jobs" -R '_check_np|^reshard_np_'
fi

if [ "${SHARDPOINT_SKIP_TSAN:-0}" != 1 ]; then
  stage "build (ThreadSanitizer: the library and the threaded tests, tests/tsan)"
  cmake -S . -B build-tsan "${light_flags[@]}" -DSHARDPOINT_WERROR=ON \
    -DSHARDPOINT_TSAN=ON -DSHARDPOINT_BENCH=OFF -DSHARDPOINT_PYTHON=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target shardpoint_tsan_tests
  stage "threaded tests under ThreadSanitizer"
  # Comm conformance on thread comms, thread comm, agreement, thread pool,
  # async save, manager, and multi-rank save/load over thread ranks
  # (cooperative load on). The 64 MiB conformance case is left out here: under
  # TSan it is ~50 s of instrumented memcpy and no thread interplay the other
  # cases lack.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    build-tsan/tests/tsan/shardpoint_tsan_tests --gtest_filter='-*CommConformance.LargePayloads*'
fi
stage "all stages passed"
