#!/usr/bin/python3
"""comm_latency: the latency of shardpoint's TorchDistributedComm collectives
beside the gloo primitives they are built from, on W local processes.

    PYTHONPATH=build-rel/python /usr/bin/python3 bench/comm_latency.py --ranks 4 --iters 200

Every save and load is a handful of collectives (docs/architecture.md, "The
collectives of a save and a load"); with a Python comm each costs milliseconds,
which a small checkpoint feels. Reported per operation: the mean time per call
on rank 0 over --iters calls (a tenth of them for the 4 MiB all_to_all and
for sp.save and sp.load of a small checkpoint on tmpfs), after a barrier
(milliseconds).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import torch
    import torch.distributed as dist
    import shardpoint as sp
    rank, world = args.worker, args.ranks
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank,
                            world_size=world)
    comm = sp.TorchDistributedComm()
    group = dist.new_group(list(range(world)), backend="gloo")
    rows = []

    def timed(name, fn, iters=args.iters):
        fn()  # warm-up
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        rows.append((name, (time.perf_counter() - t0) / iters * 1e3))

    one = torch.zeros(1, dtype=torch.int64)
    ones = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    timed("gloo all_gather (1 int64)", lambda: dist.all_gather(ones, one, group=group))
    timed("gloo gather (1 int64)",
          lambda: dist.gather(one, ones if rank == 0 else None, dst=0, group=group))
    timed("gloo broadcast (1 int64)", lambda: dist.broadcast(one, 0, group=group))
    timed("gloo all_reduce MAX (1 int64)",
          lambda: dist.all_reduce(one, op=dist.ReduceOp.MAX, group=group))
    timed("gloo barrier", lambda: dist.barrier(group=group))
    for size in (1, 64 << 10):
        data = bytes(size)
        label = "1 byte" if size == 1 else f"{size >> 10} KiB"
        timed(f"comm.all_gather ({label})", lambda: comm.all_gather(data))
        timed(f"comm.gather ({label})", lambda: comm.gather(data, 0))
        timed(f"comm.broadcast ({label})", lambda: comm.broadcast(data, 0))
        timed(f"comm.all_to_all ({label} each)", lambda: comm.all_to_all([data] * world))
    timed_n = max(1, args.iters // 10)  # for the costly rows below
    big = bytes(4 << 20)
    timed("comm.all_to_all (4 MiB each)", lambda: comm.all_to_all([big] * world), timed_n)
    timed("comm.barrier", comm.barrier)
    # A small checkpoint, where the collectives are most of the cost: each rank
    # holds rows of 8 float32 tensors of 64 x 64 (2 KiB a rank each), saved
    # to and loaded from tmpfs (so that the disk's noise stays out).
    sd = {f"t{i}": sp.chunk(f"t{i}", torch.full((64 // world, 64), float(rank)), [64, 64], 0,
                            rank, world)
          for i in range(8)}
    base = os.path.join(args.tmp, "ck")
    n = [0]

    def save():
        n[0] += 1
        sp.save(sd, f"{base}{n[0] % 4}", comm, overwrite=True, direct_io=False)

    timed("sp.save, 8 small tensors (tmpfs)", save, timed_n)
    timed("sp.load, 8 small tensors (tmpfs)", lambda: sp.load(sd, f"{base}1", comm), timed_n)
    if rank == 0:
        print(f"comm_latency: {world} processes, gloo, {args.iters} calls each "
              f"(4 MiB all_to_all, sp.save / sp.load: {timed_n}) (ms per call, rank 0)")
        for name, ms in rows:
            print(f"  {name:34s} {ms:8.3f}")
    dist.destroy_process_group()


def main():
    args = parse_args()
    if args.worker is not None:
        return worker(args)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="shardpoint_comm_", dir=shm) as d:
        init = os.path.join(d, "init")
        cmd = [sys.executable, os.path.abspath(__file__), "--ranks", str(args.ranks),
               "--iters", str(args.iters), "--init", init, "--tmp", d]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen(cmd + ["--worker", str(r)], env=env)
                 for r in range(args.ranks)]
        codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"comm_latency: a rank failed (exit codes {codes})")


if __name__ == "__main__":
    main()
