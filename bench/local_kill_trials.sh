#!/usr/bin/env bash
# Kill trials of the local tier at scale (docs/local-tier.md#guarantees): N
# trials of a job of thread ranks on 2 nodes saving local checkpoints,
# SIGKILLed at a random time in a save or at a metadata system call (the
# replication's commits among them), each followed by the checks of
# tests/local/local_kill_trials.cc. ctest runs 24 (local_kill_trials_ci).
#
#   bench/local_kill_trials.sh [N=300] [seed=7] [build dir=build-test]
#
# Needs the targets local_kill_trials and kill_shim built in the build dir
# (cmake --build build-test --target local_kill_trials).
set -euo pipefail
n=${1:-300}
seed=${2:-7}
source "$(dirname "$0")/trials_common.sh"
trials_setup local_kill_trials "${3:-build-test}"
"$bin/local_kill_trials" --dir "$dir" --trials "$n" --seed "$seed" --shim "$bin/libkill_shim.so" |
  tail -n 1
