#!/usr/bin/env bash
# Crash trials on an object store (docs/object-store.md): N trials of a saving
# job SIGKILLed at a random time during saves to an s3:// root, each followed
# by the checks of tests/crash/crash_trials.cc (every complete checkpoint
# verifies and loads bit for bit, no acknowledged save is lost). ctest's
# s3_crash_trials runs 20; this runs 200 against a radosgw it starts.
#
#   bench/s3_crash_trials.sh [N=200] [build dir=build-test] [KB=64]
#
# Needs the targets crash_trials, crash_saver and kill_shim built, and the
# Ceph binaries (scripts/setup.sh). Prints the open uploads left and the
# trials' summary line (KB above the 16 MiB part size makes the data files
# multipart uploads, which a kill can leave open).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
build=${2:-build-test}
kb=${3:-64}
bin=$build/tests/crash
dir=${TMPDIR:-/tmp}/sp_s3_crash_$$
server=$dir/server
mkdir -p "$dir"
trap 'tests/s3/radosgw.sh stop "$server"; rm -rf "$dir"' EXIT
tests/s3/radosgw.sh start "$server" >/dev/null
set -a
. "$server/env"
set +a
echo "== $n trials, SIGKILL at a random time during saves to s3://$SHARDPOINT_S3_BUCKET/crash ($kb KiB state)"
"$bin/crash_trials" --saver "$bin/crash_saver" --shim "$bin/libkill_shim.so" --dir "$dir/trials" \
  --root "s3://$SHARDPOINT_S3_BUCKET/crash" --trials "$n" --seed "${SEED:-1}" --kb "$kb" | tail -n 2
