"""One rank of a job whose last rank dies (SIGKILL) or hangs (SIGSTOP) mid-save or mid-load:
`deadline_worker.py torch|mpi save|load kill|stop <dir> <deadline_s> [rank world init_file]`.

Under mpirun (`mpi`: MPI4PyComm) the rank comes from MPI; with `torch` from the arguments
(TorchDistributedComm over gloo, file:// rendezvous). The victim, the last rank, stops or dies
on entering its second collective of the save (or of the load, after a save that every rank
completes). Each survivor prints "SURVIVOR <rank> <seconds> <exception class> <message>" for
what the save or load raised (or "NOERROR <rank>") and leaves with os._exit, as a job would
after such an error (a clean shutdown would wait for the dead rank).
"""

import os
import signal
import sys
import time

import numpy as np

import shardpoint as sp


def dying(base):
    class Dying(base):
        """`base` whose process dies or stops on entering its `at`-th collective after arm()."""

        def arm(self, at, how):
            self._n, self._at, self._how = 0, at, how

        def _tick(self):
            if getattr(self, "_at", None) is None:
                return
            self._n += 1
            if self._n == self._at:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL if self._how == "kill" else signal.SIGSTOP)

        def all_gather(self, data):
            self._tick()
            return super().all_gather(data)

        def gather(self, data, root):
            self._tick()
            return super().gather(data, root)

        def broadcast(self, data, root):
            self._tick()
            return super().broadcast(data, root)

        def barrier(self):
            self._tick()
            return super().barrier()

        def all_to_all(self, send):
            self._tick()
            return super().all_to_all(send)
    return Dying


def main():
    kind, mode, how, out, deadline = sys.argv[1:6]
    deadline = float(deadline)
    if kind == "torch":
        rank, world, init = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                                world_size=world)
        comm = dying(sp.TorchDistributedComm)(deadline=deadline)
    else:
        from mpi4py import MPI
        comm = dying(sp.MPI4PyComm)(MPI.COMM_WORLD, deadline=deadline)
        rank, world = comm.rank(), comm.size()
    victim = rank == world - 1
    rows = np.arange(8 * world, dtype=np.float32).reshape(2 * world, 4)
    local = rows[2 * rank:2 * rank + 2].copy()
    sd = {"w": sp.chunk("w", local, [2 * world, 4], 0, rank, world)}
    path = os.path.join(out, "ck")
    if mode == "load":
        sp.save(sd, path, comm)
    if victim:
        comm.arm(2, how)
    start = time.monotonic()
    try:
        if mode == "save":
            sp.save(sd, path, comm)
        else:
            sp.load(sd, path, comm)
        print(f"NOERROR {rank}", flush=True)
    except sp.Error as e:
        print(f"SURVIVOR {rank} {time.monotonic() - start:.2f} {type(e).__name__} {e}",
              flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
