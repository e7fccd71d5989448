#!/bin/bash
# cpu_per_byte_ab.sh: bench/cpu_per_byte.py with two builds of the module in
# turn (old, new, old, new, ...), so that both meet the same machine load.
#
#   bash bench/cpu_per_byte_ab.sh OLD_PYTHONPATH NEW_PYTHONPATH ROUNDS [cpu_per_byte.py args]
#   # e.g. (old module copied aside before rebuilding):
#   bash bench/cpu_per_byte_ab.sh /tmp/old_python build-test/python 2 --dirs '' --loop --gib 0.5 --reps 3
#
# Each run's table follows a header naming the build, the round and the load
# average.
set -euo pipefail
old=$1 new=$2 rounds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
for ((i = 1; i <= rounds; i++)); do
  for which in old new; do
    path=$old
    [[ $which == new ]] && path=$new
    echo "## $which (PYTHONPATH=$path) round $i; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=$path /usr/bin/python3 "$here/cpu_per_byte.py" "$@"
  done
done
