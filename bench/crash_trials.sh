#!/usr/bin/env bash
# Crash trials at scale (docs/reliability.md): N trials of a saving job killed
# with SIGKILL at a random time or at a random metadata system call, then one
# trial per metadata call of a 4-save run (killed before it, then after it),
# then M trials that SIGKILL one rank of an `mpirun -np 4` save. Every kill is
# followed by the checks of tests/crash/crash_trials.cc.
#
#   bench/crash_trials.sh [N=200] [M=20] [build dir=build-test]
#
# Needs the targets crash_trials, crash_saver and kill_shim built in the build
# dir (cmake --build build-test --target crash_trials).
set -euo pipefail
n=${1:-200}
m=${2:-20}
source "$(dirname "$0")/trials_common.sh"
trials_setup crash_trials "${3:-build-test}"
common=(--saver "$bin/crash_saver" --shim "$bin/libkill_shim.so")
mpiflags=()
if mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
  mpiflags=(--mpi-flag --oversubscribe)
  [ "$(id -u)" = 0 ] && mpiflags+=(--mpi-flag --allow-run-as-root)
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none

echo "== $n trials, random time or random metadata call"
"$bin/crash_trials" "${common[@]}" --dir "$dir/random" --trials "$n" --seed "${SEED:-1}" | tail -n 1
calls=$(cat "$dir/random/calls")
echo "== every metadata call of a 4-save run ($calls calls), before and after"
"$bin/crash_trials" "${common[@]}" --dir "$dir/every" --trials $((2 * calls)) --every-call \
  | tail -n 1
echo "== $m trials killing one rank of mpirun -np 4"
"$bin/crash_trials" "${common[@]}" --dir "$dir/mpi" --trials 0 --mpi-trials "$m" \
  --mpiexec "$(command -v mpiexec)" "${mpiflags[@]}" | tail -n 1
