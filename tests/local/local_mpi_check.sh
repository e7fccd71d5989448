#!/bin/bash
# The local tier's tests that cannot cheat: mpirun ranks grouped into nodes,
# each rank in a mount namespace that shows it only its own node's local root
# (node_ns.sh). ctest: local_tier_mpi_ns.
#
#   local_mpi_check.sh PROGRAM MPIEXEC [MPIEXEC FLAGS...]
#
# 1. 8 ranks as 4 nodes of 2 save iterations 3 (also as a persistent
#    checkpoint) and 4 to the local tier; the job ends;
# 2. node 1's copy of 3 wiped: 6 ranks on nodes 0-2 under TP3 DP2 load it
#    bit for bit with 0 bytes from persistent storage;
# 3. nodes 1 and 2's copies of 3 wiped (both copies of node 1's files): 8
#    ranks under TP4 DP2 read exactly those files' bytes from persistent
#    storage;
# 4. iteration 4: ranks moved one node on, so each reads its files from the
#    replica; a flipped bit in node 2's replica of data/2: that unit comes
#    from the other copy (more bytes from peers than without the flip), still
#    0 from persistent storage, bit for bit.
# Exit 77 (skipped) where mount namespaces are not allowed (not root).
set -euo pipefail
prog=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
if ! unshare -m --propagation private true 2>/dev/null; then
  echo "skipped: unshare -m is not permitted here"
  exit 77
fi
base=$(mktemp -d /tmp/sp_local_mpi_XXXXXX)
trap 'rm -rf "$base"' EXIT
mkdir -p "$base/mnt" "$base/nodes"/node{0,1,2,3}
pers="$base/persistent"

mpi() {  # NP MAP ARGS...
  local np=$1 map=$2
  shift 2
  "${MPI[@]}" -np "$np" sh "$here/node_ns.sh" "$base" "$map" "$prog" "$@"
}
MPI=("$@")
field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$2"; }
check() {  # WHAT ACTUAL OP EXPECTED
  if ! [ "$2" "$3" "$4" ]; then echo "FAILED: $1: $2 $3 $4"; exit 1; fi
  echo "ok: $1: $2 $3 $4"
}

mpi 8 0,0,1,1,2,2,3,3 save "$pers" 3
rm -rf "$base/nodes/node1/iter_0000003"
out=$(mpi 6 0,0,1,1,2,2 load - 3 3 1 2)
echo "one node lost, np 6 TP3 DP2: $out"
check "bytes from persistent" "$(field persistent "$out")" -eq 0
check "bytes from peers" "$(field peer "$out")" -gt 0

rm -rf "$base/nodes/node2/iter_0000003"
lost=$(( $("$prog" unit-bytes "$pers" data/2.safetensors) + \
         $("$prog" unit-bytes "$pers" data/3.safetensors) ))
out=$(mpi 8 0,0,1,1,2,2,3,3 load "$pers" 3 4 1 2)
echo "nodes 1 and 2 lost, np 8 TP4 DP2: $out"
check "bytes from persistent" "$(field persistent "$out")" -eq "$lost"

clean=$(mpi 8 1,1,2,2,3,3,0,0 load - 4 2 2 2)
echo "ranks one node on, np 8 TP2 PP2 DP2: $clean"
unit=$("$prog" flip "$base/nodes/node2/iter_0000004" data/2.safetensors)
out=$(mpi 8 1,1,2,2,3,3,0,0 load - 4 2 2 2)
echo "the same, a bit flipped in node 2's replica of data/2 (a unit of $unit bytes): $out"
check "bytes from persistent" "$(field persistent "$out")" -eq 0
check "bytes from peers" "$(field peer "$out")" -gt "$(field peer "$clean")"
check "bytes local" "$(field local "$out")" -lt "$(field local "$clean")"
