"""The Comm conformance suite on a Python adapter, at 3 ranks and then at 2.

    conformance_worker.py mpi <dir>                   (under mpirun -np 3: MPI4PyComm)
    conformance_worker.py torch <dir> rank init_dir   (3 processes: TorchDistributedComm, gloo)

Runs the suite of tests/comm/comm_conformance.h (through the test-only module
_shardpoint_testing) on an adapter over all 3 processes (all cases but the
64 MiB one), then on one over processes 0 and 1 (every case; MPI: a split of
the world, torch: a new 2-process default group) and writes
<dir>/np<N>_rank<R>.json: a list of [case, passed, failures]. Exits 0 when the
suite ran, whatever its outcome: the test reads the files. GoogleTest's
progress goes to stdout, after a line "== <N> ranks" per run, so that the test
can name the case a hung rank was in.
"""

import json
import os
import sys

import shardpoint as sp
import _shardpoint_testing

WORLD = 3
CASES = {3: "*-LargePayloads", 2: "*"}


def run(comm, out):
    size = comm.size()
    print(f"== {size} ranks", flush=True)
    results = _shardpoint_testing.run_comm_conformance([comm], CASES[size])
    with open(os.path.join(out, f"np{size}_rank{comm.rank()}.json"), "w") as f:
        json.dump(results, f)


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "mpi":
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        assert world.Get_size() == WORLD, world.Get_size()
        comm = sp.MPI4PyComm(world)
        run(comm, out)
        comm.free()
        rank = world.Get_rank()
        pair = world.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
        if pair != MPI.COMM_NULL:
            comm = sp.MPI4PyComm(pair)
            run(comm, out)
            comm.free()
            pair.Free()
        return
    import torch.distributed as dist
    rank, init = int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{init}/world3", rank=rank,
                            world_size=WORLD)
    run(sp.TorchDistributedComm(), out)
    dist.destroy_process_group()
    if rank < 2:
        dist.init_process_group("gloo", init_method=f"file://{init}/world2", rank=rank,
                                world_size=2)
        run(sp.TorchDistributedComm(), out)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
