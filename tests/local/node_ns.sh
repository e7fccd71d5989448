#!/bin/sh
# Runs one MPI rank as a process of a node of its own (local_mpi_check.sh):
#
#   node_ns.sh BASE MAP PROGRAM ARGS...
#
# MAP: the node of every rank, comma-separated ("0,0,1,1": ranks 0 and 1 on
# node 0). In a new mount namespace (unshare -m, private propagation) the
# rank's node directory BASE/nodes/nodeN is bound at BASE/mnt, the same path
# on every node, and an empty tmpfs covers BASE/nodes, so the rank sees its
# node's local root and no other. PROGRAM gets SP_LOCAL_ROOT, SP_NODE and
# SP_HIDDEN (local_mpi_check.cc).
set -eu
base=$1
map=$2
shift 2
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
node=$(echo "$map" | cut -d, -f$((rank + 1)))
[ -n "$node" ] || { echo "node_ns.sh: no node for rank $rank in '$map'" >&2; exit 2; }
export SP_LOCAL_ROOT="$base/mnt" SP_NODE="node$node" SP_HIDDEN="$base/nodes"
exec unshare -m --propagation private sh -c '
  mount --bind "$SP_HIDDEN/$SP_NODE" "$SP_LOCAL_ROOT" && mount -t tmpfs none "$SP_HIDDEN" &&
  exec "$@"' node_ns "$@"
