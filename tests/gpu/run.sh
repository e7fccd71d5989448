#!/usr/bin/env bash
# The checks that need this project's GPU machine (PyTorch 2.x with CUDA,
# DTensor, FSDP2 and torch.distributed.checkpoint; not Debian's torch 1.13),
# run there through the device tool, never in CI:
#   1. builds the Python module and the CLI with the machine's Python and CMake
#      (the build dependencies it lacks come in .devdeps: tests/gpu/pack_deps.sh);
#   2. writes the torch 2.x DCP fixtures (tests/dcp/fixtures/make_torch2_fixture.py);
#   3. the Python tests that need CUDA or torch >= 2.4 (skipped elsewhere);
#   4. bench/peers_bench.py --device cuda (GPU state; torch 2.x DCP as a peer).
# Everything lands in $OUT: logs, the bench's JSON, the fixtures as a tarball.
#   here:  bash tests/gpu/pack_deps.sh
#   there: bash tests/gpu/run.sh [GIB] [REPS]     (carry .devdeps)
#          SHARDPOINT_GPU_STAGES="build tests" bash tests/gpu/run.sh
#          SHARDPOINT_GPU_STAGES="build bench" SHARDPOINT_GPU_PEERS="shardpoint;torch.save" \
#            bash tests/gpu/run.sh 2 3
#   SHARDPOINT_GPU_BENCH_S: the bench's time limit (default 240 s);
#   SHARDPOINT_GPU_TESTS: the tests stage's pytest arguments.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/shardpoint_gpu_out}
mkdir -p "$OUT"
gib=${1:-2}
reps=${2:-3}
t0=$SECONDS
stage() { echo "== $* [$((SECONDS - t0)) s]"; }
# SHARDPOINT_GPU_STAGES picks stages (a rerun of the tests alone: "build tests").
stages=" ${SHARDPOINT_GPU_STAGES:-build fixtures bench tests} "
want() { [[ "$stages" == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
{
  nvidia-smi -L; python3 --version; which python3
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  g++ --version | head -1; cmake --version | head -1; nproc; free -g | head -2
  df -h /tmp | tail -1; command -v fio || echo "no fio"
  echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
} > "$OUT/env.txt" 2>&1

if want build; then
stage "build"
deps=$PWD/.devdeps
pyinc=()
if ! python3 -c "import os, sysconfig, sys; \
sys.exit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))"; then
  pyinc=(-DPython_INCLUDE_DIR="$deps/python3.12")
fi
b=/tmp/spb
gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
timeout 300 cmake -S . -B $b "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSHARDPOINT_TESTS=OFF \
  -DSHARDPOINT_BENCH=OFF -DSHARDPOINT_EXAMPLES=OFF -DSHARDPOINT_INSTALL=OFF \
  -DSHARDPOINT_CLI=ON -DSHARDPOINT_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" \
  -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" \
  -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" -DCLI11_DIR="$deps/share/cmake/CLI11" \
  -DXXHASH_LIB="$deps/lib/libxxhash.a" -DXXHASH_INCLUDE="$deps/include" "${pyinc[@]}" \
  > "$OUT/build.log" 2>&1 &&
  timeout 300 cmake --build $b -j"$(nproc)" --target _shardpoint shardpoint_cli \
  >> "$OUT/build.log" 2>&1
echo "build exit $?"
tail -3 "$OUT/build.log"
fi
export PYTHONPATH=/tmp/spb/python

if want fixtures; then
stage "torch 2.x DCP fixtures"
timeout 90 python3 tests/dcp/fixtures/make_torch2_fixture.py 2>&1 | tail -3
timeout 90 python3 tests/dcp/fixtures/make_torch2_newer_dtypes.py 2>&1 | tail -1
tar czf "$OUT/torch2_fixtures.tgz" -C tests/dcp/fixtures torch2_2ranks torch2_per_rank \
  torch2_newer_dtypes v3_pickles
fi

if want bench; then
# SHARDPOINT_GPU_PEERS: the peers to run (skips the tiny run that picks them).
peers=${SHARDPOINT_GPU_PEERS:-}
if [ -z "$peers" ]; then
  stage "tiny CUDA peers run (pytest)"
  timeout 150 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_peers_bench.py::test_tiny_cuda_run_of_every_peer 2>&1 | tail -15
  tiny=${PIPESTATUS[0]}
  peers="shardpoint;torch.save;PyTorch DCP;fio;memcpy"
  [ "$tiny" = 0 ] || peers="shardpoint;torch.save;fio;memcpy"
fi
if ! command -v fio > /dev/null; then  # a disk reference where fio is missing
  stage "dd O_DIRECT, 2 GiB in 4 MiB requests, one stream (no fio here)"
  { dd if=/dev/zero of=/tmp/dd_probe bs=4M count=512 oflag=direct conv=fsync 2>&1 | tail -1
    dd if=/tmp/dd_probe of=/dev/null bs=4M iflag=direct 2>&1 | tail -1; } | tee "$OUT/dd.txt"
  rm -f /tmp/dd_probe
fi

stage "peers_bench --device cuda --gib $gib --reps $reps (peers: $peers)"
timeout "${SHARDPOINT_GPU_BENCH_S:-240}" python3 bench/peers_bench.py --device cuda --gib "$gib" --reps "$reps" --preback 0 \
  --dir /tmp/pq --peers "$peers" --json "$OUT/gpu_peers.json" --keep > "$OUT/peers.log" 2>&1
echo "peers_bench exit $?"
pkill -f "peers_bench.py --gib" || true  # ranks left by a timeout
[ -f "$OUT/gpu_peers.json" ] || cp /tmp/pq/results.json "$OUT/gpu_peers_partial.json"
grep -v "^peers_bench: rep" "$OUT/peers.log" | tail -25
fi

if want tests; then
stage "pytest: CUDA, DTensor, FSDP2 and torch 2.x DCP tests"
# SHARDPOINT_GPU_TESTS: the pytest arguments (default: every test that needs this
# machine, and the error, staged-load and module-symbol tests: this machine's
# toolchain and torch differ from the development machine's, and a load error
# once crashed here)
# shellcheck disable=SC2086
timeout 300 python3 -m pytest -q -p no:cacheprovider -rs ${SHARDPOINT_GPU_TESTS:-python/tests/test_cuda.py \
  python/tests/test_staging.py python/tests/test_staged_load.py python/tests/test_errors.py \
  python/tests/test_module_symbols.py \
  python/tests/test_torch2_dcp.py python/tests/test_torch2_fsdp.py \
  python/tests/test_torch2_dcp_backend.py \
  python/tests/test_torch_layouts.py::test_dtensor_placements_map_to_layouts} \
  > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"
tail -30 "$OUT/pytest.log"
fi
stage "done"
